/* vocab: the emulated model's tokenizer rule, its words and its EOS draw. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/vocab.h"

static int64_t count(const char *s)
{
    return vocab_tokenize(s, strlen(s), NULL, 0, 0);
}

static void test_tokenize_rule(void **state)
{
    (void)state;
    assert_int_equal(count(""), 0);
    assert_int_equal(count(" \t\n\r\v\f"), 0);
    assert_int_equal(count("a"), 1);
    assert_int_equal(count("abcd"), 1);
    assert_int_equal(count("abcde"), 2);
    assert_int_equal(count("The quick brownish fox"), 6); /* 1 + 2 + 2 + 1 */
    assert_int_equal(count("  lead and trail  "), 4); /* 1 + 1 + 2 */
    assert_int_equal(count("a\nb\tc"), 3);
    assert_int_equal(count("\xc3\xa9t\xc3\xa9"), 2); /* 5 bytes of UTF-8: bytes, not chars */
    /* Ids: deterministic, in range, one per piece; a short ids array is filled partly. */
    int32_t ids[8], again[8];
    assert_int_equal(vocab_tokenize("hello world", 11, ids, 8, 1000), 4);
    assert_int_equal(vocab_tokenize("hello world", 11, again, 8, 1000), 4);
    assert_memory_equal(ids, again, 4 * sizeof ids[0]);
    for (int i = 0; i < 4; i++)
        assert_true(ids[i] >= 0 && ids[i] < 1000);
    int32_t one[1] = {-7};
    assert_int_equal(vocab_tokenize("hello world", 11, one, 1, 1000), 4);
    assert_int_equal(one[0], ids[0]);
}

static void test_words(void **state)
{
    (void)state;
    size_t len;
    for (int32_t t = 0; t < VOCAB_WORDS; t++) {
        const char *w = vocab_text(t, &len);
        assert_true(len >= 2 && w[0] == ' ' && strlen(w) == len);
        for (size_t i = 1; i < len; i++)
            assert_true(w[i] >= 'a' && w[i] <= 'z');
    }
    assert_string_equal(vocab_text(VOCAB_EOS, &len), "");
    assert_int_equal(len, 0);
    assert_string_equal(vocab_text(-1, &len), "");
    /* A pure function of (seed, position); seeds give different answers. */
    int same = 0;
    for (int64_t p = 0; p < 200; p++) {
        assert_int_equal(vocab_word(7, p), vocab_word(7, p));
        assert_true(vocab_word(7, p) >= 0 && vocab_word(7, p) < VOCAB_WORDS);
        same += vocab_word(7, p) == vocab_word(8, p);
    }
    assert_true(same < 20);
}

static void test_eos(void **state)
{
    (void)state;
    int64_t lo = 1 << 30, hi = 0;
    for (uint64_t seed = 0; seed < 5000; seed++) {
        int64_t at = vocab_eos_position(seed, 0);
        lo = at < lo ? at : lo;
        hi = at > hi ? at : hi;
        assert_int_equal(vocab_eos_position(seed, 300), 300); /* min_tokens pushes it out */
        assert_true(vocab_eos_position(seed, 20) >= 20);
    }
    assert_int_equal(lo, 16);
    assert_int_equal(hi, 256);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenize_rule),
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_eos),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
