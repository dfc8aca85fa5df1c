#include "engine/vocab.h"

#include "common/rng.h"

/* Salts keep the word stream and the EOS draw independent of each other and of other
 * users of rng_hash3 on the same seed. */
#define VOCAB_SALT 0x766f636162ULL     /* "vocab" */
#define VOCAB_EOS_SALT 0x656f73ULL     /* "eos" */

typedef struct vocab_entry {
    const char *text;
    size_t len;
} vocab_entry;

/* " word" with its length computed at compile time: the HTTP thread looks a word up for
 * every token it streams. */
#define W(word) {" " word, sizeof(word)}

/* 256 of the most common English words. */
static const vocab_entry words[VOCAB_WORDS] = {
    W("the"), W("of"), W("and"), W("to"), W("in"), W("is"), W("that"), W("it"), W("was"),
    W("for"), W("on"), W("are"), W("as"), W("with"), W("his"), W("they"), W("at"), W("be"),
    W("this"), W("from"), W("have"), W("or"), W("by"), W("one"), W("had"), W("not"),
    W("but"), W("what"), W("all"), W("were"), W("when"), W("we"), W("there"), W("can"),
    W("an"), W("your"), W("which"), W("their"), W("said"), W("if"), W("do"), W("will"),
    W("each"), W("about"), W("how"), W("up"), W("out"), W("them"), W("then"), W("she"),
    W("many"), W("some"), W("so"), W("these"), W("would"), W("other"), W("into"), W("has"),
    W("more"), W("her"), W("two"), W("like"), W("him"), W("see"), W("time"), W("could"),
    W("no"), W("make"), W("than"), W("first"), W("been"), W("its"), W("who"), W("now"),
    W("people"), W("my"), W("made"), W("over"), W("did"), W("down"), W("only"), W("way"),
    W("find"), W("use"), W("may"), W("water"), W("long"), W("little"), W("very"),
    W("after"), W("words"), W("called"), W("just"), W("where"), W("most"), W("know"),
    W("get"), W("through"), W("back"), W("much"), W("go"), W("good"), W("new"), W("write"),
    W("our"), W("me"), W("man"), W("too"), W("any"), W("day"), W("same"), W("right"),
    W("look"), W("think"), W("also"), W("around"), W("another"), W("came"), W("come"),
    W("work"), W("three"), W("word"), W("must"), W("because"), W("does"), W("part"),
    W("even"), W("place"), W("well"), W("such"), W("here"), W("take"), W("why"),
    W("things"), W("help"), W("put"), W("years"), W("different"), W("away"), W("again"),
    W("off"), W("went"), W("old"), W("number"), W("great"), W("tell"), W("men"), W("say"),
    W("small"), W("every"), W("found"), W("still"), W("between"), W("name"), W("should"),
    W("home"), W("big"), W("give"), W("air"), W("line"), W("set"), W("own"), W("under"),
    W("read"), W("last"), W("never"), W("us"), W("left"), W("end"), W("along"), W("while"),
    W("might"), W("next"), W("sound"), W("below"), W("saw"), W("something"), W("thought"),
    W("both"), W("few"), W("those"), W("always"), W("looked"), W("show"), W("large"),
    W("often"), W("together"), W("asked"), W("house"), W("world"), W("going"), W("want"),
    W("school"), W("important"), W("until"), W("form"), W("food"), W("keep"), W("children"),
    W("feet"), W("land"), W("side"), W("without"), W("boy"), W("once"), W("animals"),
    W("life"), W("enough"), W("took"), W("four"), W("head"), W("above"), W("kind"),
    W("began"), W("almost"), W("live"), W("page"), W("got"), W("earth"), W("need"),
    W("far"), W("hand"), W("high"), W("year"), W("mother"), W("light"), W("country"),
    W("father"), W("let"), W("night"), W("picture"), W("being"), W("study"), W("second"),
    W("soon"), W("story"), W("since"), W("white"), W("ever"), W("paper"), W("hard"),
    W("near"), W("sentence"), W("better"), W("best"), W("across"), W("during"), W("today"),
    W("however"), W("sure"), W("knew"), W("try"), W("told"), W("young"), W("sun"),
    W("thing"),
};

const char *vocab_text(int32_t token, size_t *len)
{
    if (token < 0 || token >= VOCAB_WORDS) {
        *len = 0;
        return "";
    }
    *len = words[token].len;
    return words[token].text;
}

int32_t vocab_word(uint64_t seed, int64_t position)
{
    return (int32_t)(rng_hash3(seed, (uint64_t)position, VOCAB_SALT) % VOCAB_WORDS);
}

int64_t vocab_eos_position(uint64_t seed, int min_tokens)
{
    const int64_t drawn = 16 + (int64_t)(rng_hash3(seed, 0, VOCAB_EOS_SALT) % 241);
    return drawn > min_tokens ? drawn : min_tokens;
}

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* FNV-1a over one piece: a stable id for executors that want ids of text prompts. */
static int32_t piece_id(const unsigned char *p, size_t n, int32_t vocab_size)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return vocab_size > 0 ? (int32_t)(h % (uint64_t)vocab_size) : 0;
}

int64_t vocab_tokenize(const char *text, size_t len, int32_t *ids, int64_t max_ids,
                       int32_t vocab_size)
{
    const unsigned char *p = (const unsigned char *)text;
    int64_t count = 0;
    size_t i = 0;
    while (i < len) {
        if (is_space(p[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < len && !is_space(p[i]))
            i++;
        /* The word [start, i) in pieces of VOCAB_PIECE_BYTES. */
        for (size_t at = start; at < i; at += VOCAB_PIECE_BYTES) {
            size_t n = i - at < VOCAB_PIECE_BYTES ? i - at : VOCAB_PIECE_BYTES;
            if (ids && count < max_ids)
                ids[count] = piece_id(p + at, n, vocab_size);
            count++;
        }
    }
    return count;
}
