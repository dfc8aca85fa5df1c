/* shard — one process's share of a sharded experiment, and its clock (docs/guide/shards.md).
 *
 * Which users a shard runs is the workload's rule (wl.shard); this file holds the time.
 * Every shard is given one start time (--start-at, UTC); that instant is each run's t = 0:
 * the shard starts its users a warm-up before it, so at t = 0 they are mid-answer as in any
 * run. Stamps stay CLOCK_MONOTONIC within a shard, as in every run: a gap is a difference
 * of two monotonic readings, which no step of the wall clock (an NTP step, settimeofday, a
 * leap second) can bend. CLOCK_REALTIME is read once per run, paired with the monotonic
 * clock at t = 0 (t0_realtime_ns); the merge places each shard's tokens on the common axis
 * by that pairing. The two clocks tick at one rate (NTP slews both), so the pairing holds
 * for the whole run unless the wall clock is stepped, which the run's record measures
 * (step_ns). How far apart two shards' t = 0 can really be is what the kernels say of
 * their wall clocks (adjtimex maxerror), or nothing but the pairing when they share one
 * kernel. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timex.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/runner.h"
#include "experiment/shard.h"

#define MAX_AHEAD_NS (7LL * 24 * 3600 * CLOCK_NS_PER_S) /* a start a week ahead is a typo */
#define WAIT_SLICE_NS (100 * CLOCK_NS_PER_MS)           /* how often a wait checks for ^C */
#define PAIR_TRIES 8
#define SETTLE_NS (2 * CLOCK_NS_PER_S)
/* NTP_PHASE_LIMIT: the kernel's maxerror ceiling, and what an unreadable clock is worth. */
#define UNKNOWN_ERROR_US 16000000LL

/* ---- options ------------------------------------------------------------------------------ */

static int parse_uint(const char **p, int *out)
{
    const char *s = *p;
    long v = 0;
    int digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 9)
        v = v * 10 + (*s++ - '0'), digits++;
    if (digits == 0 || (*s >= '0' && *s <= '9'))
        return -1;
    *out = (int)v;
    *p = s;
    return 0;
}

static int sh_shard(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    const char *p = v;
    int index, count;
    if (parse_uint(&p, &index) != 0 || *p++ != '/' || parse_uint(&p, &count) != 0 || *p)
        return err_set(err, "'%s' is not I/N (shard I of N, e.g. 0/4)", v);
    if (count < 1 || count > WORKLOAD_MAX_SHARDS)
        return err_set(err, "'%s': N must be between 1 and %d", v, WORKLOAD_MAX_SHARDS);
    if (index >= count)
        return err_set(err, "'%s': I must be between 0 and %d", v, count - 1);
    cfg->wl.shard.index = index;
    cfg->wl.shard.count = count;
    return 0;
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
}

static int sh_start_at(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    if (experiment_parse_start_at(v, realtime_ns(), &cfg->shard.start_at_ns, err) != 0)
        return -1;
    experiment_format_utc(cfg->shard.start_at_ns, cfg->shard.start_at, sizeof cfg->shard.start_at);
    return 0;
}

static const opts_spec shard_specs[] = {
    OPTS_FN("shard", "I/N",
            "run shard I of N: background users u with u mod N = I (the injector in shard 0); "
            "needs --target and --start-at",
            sh_shard),
    OPTS_FN("start-at", "TIME",
            "t = 0 of every shard, UTC: 2026-12-01T10:00:00Z, or now+30s (resolved in each "
            "process: give shards one absolute time); the warm-up ends then",
            sh_start_at),
};

opts_group experiment_shard_group(experiment_config *cfg)
{
    return (opts_group){"shards (docs/guide/shards.md)", shard_specs, OPTS_COUNT(shard_specs), cfg};
}

/* ---- UTC text ---------------------------------------------------------------------------- */

/* Exactly `digits` decimal digits. */
static int fixed(const char **p, int digits, int *out)
{
    int v = 0;
    for (int i = 0; i < digits; i++) {
        char ch = (*p)[i];
        if (ch < '0' || ch > '9')
            return -1;
        v = v * 10 + (ch - '0');
    }
    *p += digits;
    *out = v;
    return 0;
}

static int parse_utc(const char *text, int64_t *out_ns)
{
    const char *p = text;
    int year, mon, day, hour, min, sec, frac_ns = 0;
    if (fixed(&p, 4, &year) || *p++ != '-' || fixed(&p, 2, &mon) || *p++ != '-' ||
        fixed(&p, 2, &day) || (*p != 'T' && *p != 't'))
        return -1;
    p++;
    if (fixed(&p, 2, &hour) || *p++ != ':' || fixed(&p, 2, &min) || *p++ != ':' ||
        fixed(&p, 2, &sec))
        return -1;
    if (*p == '.') {
        p++;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 9)
            frac_ns = frac_ns * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || (*p >= '0' && *p <= '9'))
            return -1;
        for (; digits < 9; digits++)
            frac_ns *= 10;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0')
        ;
    else if (strcmp(p, "+00:00") != 0)
        return -1;
    struct tm tm = {.tm_year = year - 1900, .tm_mon = mon - 1, .tm_mday = day,
                    .tm_hour = hour, .tm_min = min, .tm_sec = sec};
    time_t t = timegm(&tm);
    /* timegm normalises Feb 30 into March: the fields must come back as typed. */
    struct tm back;
    if (t == (time_t)-1 || !gmtime_r(&t, &back) || back.tm_year != year - 1900 ||
        back.tm_mon != mon - 1 || back.tm_mday != day || back.tm_hour != hour ||
        back.tm_min != min || back.tm_sec != sec)
        return -1;
    *out_ns = (int64_t)t * CLOCK_NS_PER_S + frac_ns;
    return 0;
}

void experiment_format_utc(int64_t ns, char *buf, size_t size)
{
    time_t t = (time_t)(ns / CLOCK_NS_PER_S);
    int64_t frac = ns % CLOCK_NS_PER_S;
    if (frac < 0)
        frac += CLOCK_NS_PER_S, t--;
    struct tm tm;
    char whole[40] = "?", digits[16] = "";
    if (gmtime_r(&t, &tm))
        strftime(whole, sizeof whole, "%Y-%m-%dT%H:%M:%S", &tm);
    if (frac) {
        int len = snprintf(digits, sizeof digits, ".%09lld", (long long)frac);
        while (len > 1 && digits[len - 1] == '0')
            digits[--len] = '\0';
    }
    snprintf(buf, size, "%s%sZ", whole, digits);
}

int experiment_parse_start_at(const char *text, int64_t now_ns, int64_t *out_ns, char *err)
{
    int64_t at;
    if (strncmp(text, "now+", 4) == 0) {
        int64_t ahead;
        char why[ERR_LEN];
        if (units_parse_duration_ns(text + 4, &ahead, why) != 0)
            return err_set(err, "'%s': %s", text, why);
        if (ahead <= 0)
            return err_set(err, "'%s' is not ahead of now", text);
        if (ahead > MAX_AHEAD_NS)
            return err_set(err, "'%s' is more than 7 days ahead", text);
        at = now_ns + ahead;
    } else if (parse_utc(text, &at) != 0) {
        return err_set(err, "'%s' is not a UTC time like 2026-12-01T10:00:00Z (or now+30s)",
                       text);
    }
    char now_text[48];
    experiment_format_utc(now_ns - now_ns % CLOCK_NS_PER_S, now_text, sizeof now_text);
    if (at <= now_ns)
        return err_set(err, "%s is in the past (now: %s): give a time ahead, e.g. now+30s", text,
                       now_text);
    if (at - now_ns > MAX_AHEAD_NS)
        return err_set(err, "%s is more than 7 days ahead (now: %s)", text, now_text);
    *out_ns = at;
    return 0;
}

/* ---- the schedule of a pair --------------------------------------------------------------- */

int64_t experiment_shard_phase_start(const experiment_config *cfg, bool second)
{
    if (!second)
        return cfg->shard.start_at_ns;
    int64_t settle = SETTLE_NS + cfg->wl.duration_ns / 20;
    return cfg->shard.start_at_ns + cfg->wl.duration_ns + settle + cfg->client.warmup_ns;
}

/* ---- the clock ------------------------------------------------------------------------------- */

static void read_line(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(buf, (int)size, f))
        buf[strcspn(buf, "\r\n")] = '\0';
    fclose(f);
}

void experiment_clock_read(experiment_clock *out)
{
    memset(out, 0, sizeof *out);
    struct timex tx;
    memset(&tx, 0, sizeof tx); /* modes 0: read only, no privilege needed */
    int state = adjtimex(&tx);
    if (state < 0) {
        out->state = -1;
        out->maxerror_us = out->esterror_us = -1;
    } else {
        out->state = state;
        out->status = tx.status;
        out->maxerror_us = tx.maxerror;
        out->esterror_us = tx.esterror;
        out->synchronized = state != TIME_ERROR && !(tx.status & STA_UNSYNC);
    }
    read_line("/proc/sys/kernel/random/boot_id", out->boot_id, sizeof out->boot_id);
    if (gethostname(out->host, sizeof out->host) != 0)
        out->host[0] = '\0';
    out->host[sizeof out->host - 1] = '\0';
}

int64_t experiment_clock_uncertainty_ns(const experiment_clock *a, const experiment_clock *b,
                                        bool estimated)
{
    if (a->boot_id[0] && strcmp(a->boot_id, b->boot_id) == 0)
        return 0; /* one kernel: the merge places shards by its one CLOCK_MONOTONIC */
    int64_t e = a->pair_error_ns + b->pair_error_ns + llabs(a->step_ns) + llabs(b->step_ns);
    int64_t ea = estimated ? a->esterror_us : a->maxerror_us;
    int64_t eb = estimated ? b->esterror_us : b->maxerror_us;
    ea = ea < 0 || ea > UNKNOWN_ERROR_US ? UNKNOWN_ERROR_US : ea;
    eb = eb < 0 || eb > UNKNOWN_ERROR_US ? UNKNOWN_ERROR_US : eb;
    return e + (ea + eb) * 1000;
}

/* ---- around a run --------------------------------------------------------------------------- */

int experiment_shard_wait(const experiment_phase *ph, experiment_shard_start *st,
                          int64_t *warmup_ns, char *err)
{
    const experiment_config *cfg = ph->cfg;
    memset(st, 0, sizeof *st);
    if (cfg->wl.shard.count <= 0)
        return 0;
    st->sharded = true;
    const int index = cfg->wl.shard.index, count = cfg->wl.shard.count;
    st->planned_ns =
        experiment_shard_phase_start(cfg, ph->wl->inject && !cfg->no_baseline && !cfg->wl.no_inject);
    char planned[48];
    experiment_format_utc(st->planned_ns, planned, sizeof planned);
    int64_t pair_error;
    st->offset_ns = clock_realtime_offset_ns(PAIR_TRIES, &pair_error);
    const int64_t t0_mono = st->planned_ns - st->offset_ns;
    const int64_t warm_begin = t0_mono - cfg->client.warmup_ns;
    int64_t now = clock_now_ns();
    if (now >= t0_mono)
        return err_set(err, "shard %d/%d: the %s run was to start at %s, %.3f s ago: this "
                            "shard was not ready in time (give a later --start-at)",
                       index, count, ph->label, planned, (double)(now - t0_mono) / 1e9);
    if (ph->notes && !ph->quiet)
        fprintf(ph->notes, "[%s] shard %d/%d: t = 0 at %s, in %.1f s\n", ph->label, index, count,
                planned, (double)(t0_mono - now) / 1e9);
    if (now > warm_begin && ph->notes)
        fprintf(ph->notes, "[%s] shard %d/%d: note: %.2f s of warm-up left before t = 0 (asked "
                           "for %.2f s)\n",
                ph->label, index, count, (double)(t0_mono - now) / 1e9,
                (double)cfg->client.warmup_ns / 1e9);
    /* Bounded: warm_begin is at most 7 days ahead (experiment_parse_start_at). */
    while ((now = clock_now_ns()) < warm_begin) {
        if (ph->interrupted && *ph->interrupted)
            return err_set(err, "interrupted while waiting for the start time");
        clock_sleep_until_ns(now + WAIT_SLICE_NS < warm_begin ? now + WAIT_SLICE_NS : warm_begin);
    }
    /* The wall clock's pairing again, now: it may run at another rate than the monotonic
     * clock (a VM's has been seen 5,000 ppm apart), so the one read before the wait (up to
     * days ago) would place t = 0 off by that rate times the wait. */
    st->offset_ns = clock_realtime_offset_ns(PAIR_TRIES, &pair_error);
    const int64_t t0_now = st->planned_ns - st->offset_ns;
    experiment_clock_read(&st->clock);
    st->clock.pair_error_ns = pair_error;
    *warmup_ns = t0_now - clock_now_ns();
    if (*warmup_ns <= 0)
        return err_set(err, "shard %d/%d: the %s run's start %s passed while this shard was "
                            "getting ready",
                       index, count, ph->label, planned);
    return 0;
}

void experiment_shard_record(const experiment_shard_start *st, int64_t t0_mono_ns,
                             experiment_meta *meta)
{
    if (!st->sharded)
        return;
    int64_t pair_error;
    int64_t offset_end = clock_realtime_offset_ns(PAIR_TRIES, &pair_error);
    experiment_clock end;
    experiment_clock_read(&end);
    meta->t0_realtime_ns = t0_mono_ns + st->offset_ns;
    meta->start_late_ns = meta->t0_realtime_ns - st->planned_ns;
    experiment_clock c = st->clock;
    /* The run's clock is the worse of its two readings. */
    if (end.maxerror_us < 0 || (c.maxerror_us >= 0 && end.maxerror_us > c.maxerror_us))
        c.maxerror_us = end.maxerror_us;
    if (end.esterror_us < 0 || (c.esterror_us >= 0 && end.esterror_us > c.esterror_us))
        c.esterror_us = end.esterror_us;
    if (!end.synchronized) {
        c.synchronized = false;
        c.state = end.state;
        c.status = end.status;
    }
    if (pair_error > c.pair_error_ns)
        c.pair_error_ns = pair_error;
    c.step_ns = offset_end - st->offset_ns;
    meta->clock = c;
}
