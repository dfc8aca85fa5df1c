"""--save-result's vLLM keys against the run's own CSVs (ctest registers only *.sh):

    python3 check_result.py RUN_DIR RESULT_JSON

Every value is worked out again here from RUN_DIR/interference/{requests,tokens}.csv (a
--no-inject run's RUN_DIR/traffic/) with
vLLM's meanings: completed = sent at t >= 0, no error, ended with a finish reason other than
abort; TTFT, E2E, TPOT = (E2E - TTFT) / (completion tokens - 1); ITL every gap between two
token events of one request; numpy's interpolated percentiles; population std; the peaks
(max_output_tokens_per_s, max_concurrent_requests) over whole seconds. With
--save-detailed's arrays (input_lens, output_lens, ttfts, itls, start_times, latencies,
errors), each request's entry again from the CSVs. Exit 1 on any difference beyond 1e-6
(relative), listing them."""
import csv, json, math, os, sys
run, res = sys.argv[1], json.load(open(sys.argv[2]))
run += "/traffic" if os.path.isdir(f"{run}/traffic") else "/interference"
reqs = {r["request"]: r for r in csv.DictReader(open(f"{run}/requests.csv"))}
def done(r):
    return (int(r["t_send_ns"]) >= 0 and not r["error"] and int(r["t_end_ns"]) >= 0 and
            int(r["t_first_ns"]) >= 0 and r["finish_reason"] not in ("", "abort"))
ok = [r for r in reqs.values() if done(r)]
ttft = [(int(r["t_first_ns"]) - int(r["t_send_ns"])) / 1e6 for r in ok]
e2el = [(int(r["t_end_ns"]) - int(r["t_send_ns"])) / 1e6 for r in ok]
tpot = [(e - t) / (int(r["completion_tokens"]) - 1) for r, t, e in zip(ok, ttft, e2el)
        if int(r["completion_tokens"]) > 1]
last, itl = {}, []
for ev in csv.DictReader(open(f"{run}/tokens.csv")):
    r = reqs[ev["request"]]
    t = int(ev["t_ns"])
    if ev["request"] in last:
        itl.append((t - last[ev["request"]]) / 1e6)
    last[ev["request"]] = t
def pct(v, p):
    v = sorted(v); k = p / 100 * (len(v) - 1); lo = math.floor(k)
    return v[-1] if lo >= len(v) - 1 else v[lo] + (v[lo + 1] - v[lo]) * (k - lo)
mean = lambda v: sum(v) / len(v)
std = lambda v: math.sqrt(sum((x - mean(v)) ** 2 for x in v) / len(v))
want = {"completed": len(ok), "total_output_tokens": sum(int(r["completion_tokens"]) for r in ok),
        "mean_ttft_ms": mean(ttft), "median_ttft_ms": pct(ttft, 50), "std_ttft_ms": std(ttft),
        "p99_ttft_ms": pct(ttft, 99), "mean_tpot_ms": mean(tpot), "p90_tpot_ms": pct(tpot, 90),
        "mean_itl_ms": mean(itl), "p99_itl_ms": pct(itl, 99), "p99.9_itl_ms": pct(itl, 99.9),
        "median_e2el_ms": pct(e2el, 50), "std_e2el_ms": std(e2el)}
# vLLM's peaks: whole seconds from the first completed request's send; token events of
# completed requests per second, and completed requests in flight (send's second to end's).
if ok:
    start = min(int(r["t_send_ns"]) for r in ok)
    span = max(int(r["t_end_ns"]) for r in ok) - start
    nsec = -(-span // 1_000_000_000) + 1
    per_s, flight = [0] * nsec, [0] * nsec
    done_ids = {r["request"] for r in ok}
    for ev in csv.DictReader(open(f"{run}/tokens.csv")):
        b = (int(ev["t_ns"]) - start) // 1_000_000_000
        if ev["request"] in done_ids and 0 <= b < nsec:
            per_s[b] += 1
    for r in ok:
        for b in range((int(r["t_send_ns"]) - start) // 1_000_000_000,
                       min((int(r["t_end_ns"]) - start) // 1_000_000_000 + 1, nsec)):
            flight[b] += 1
    want["max_output_tokens_per_s"] = max(per_s)
    want["max_concurrent_requests"] = max(flight)
bad = [f"{k}: {res[k]} vs {v}" for k, v in want.items() if abs(res[k] - v) > 1e-6 * max(1, abs(v))]
# --save-detailed: one entry per request sent at t >= 0, in request order, seconds.
if "ttfts" in res:
    sent = sorted((r for r in reqs.values() if int(r["t_send_ns"]) >= 0), key=lambda r: int(r["request"]))
    gaps, prev = {}, {}
    for ev in csv.DictReader(open(f"{run}/tokens.csv")):
        k, t = ev["request"], int(ev["t_ns"])
        if k in prev:
            gaps.setdefault(k, []).append((t - prev[k]) / 1e9)
        prev[k] = t
    detail = {"input_lens": [int(r["prompt_tokens"]) for r in sent],
              "output_lens": [int(r["completion_tokens"]) for r in sent],
              "ttfts": [(int(r["t_first_ns"]) - int(r["t_send_ns"])) / 1e9 if int(r["t_first_ns"]) >= 0
                        else 0.0 for r in sent],
              "start_times": [int(r["t_send_ns"]) / 1e9 for r in sent],
              "latencies": [(int(r["t_end_ns"]) - int(r["t_send_ns"])) / 1e9 if done(r) else 0.0
                            for r in sent],
              "errors": [r["error"] if r["error"] else "" if done(r)
                         else "unfinished: cut at the run's end" for r in sent]}
    if res.get("generated_texts") != [None] * len(sent):
        bad.append("generated_texts: not one null per request")
    flat = lambda v: [x for g in v for x in g]
    for k, v in detail.items():
        got = res.get(k)
        if got is None or len(got) != len(v) or any(
                (a != b) if isinstance(b, str) else abs(a - b) > 1e-9 * max(1, abs(b))
                for a, b in zip(got, v)):
            bad.append(f"{k}: {str(got)[:80]} vs {str(v)[:80]}")
    want_itls = [gaps.get(r["request"], []) for r in sent]
    if [len(g) for g in res.get("itls", [])] != [len(g) for g in want_itls] or any(
            abs(a - b) > 1e-9 for a, b in zip(flat(res["itls"]), flat(want_itls))):
        bad.append("itls differ from tokens.csv's gaps")
    want.update(detail)
print("\n".join(bad) if bad else f"ok   --save-result: {len(want)} keys as computed from the CSVs "
      f"({len(ok)} requests, {len(itl)} gaps)")
sys.exit(1 if bad else 0)
