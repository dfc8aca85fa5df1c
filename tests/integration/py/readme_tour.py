"""The README's tour, run as printed (tests/integration/readme_tour.sh; issue 28, point 1).

usage: readme_tour.py STALLSCOPE_BINARY SCRATCH_DIR README.md Makefile

The tour is the first ``` block after the README's "tour" heading. Every line of it runs, in
order, in one scratch directory, after what `make run` leaves there (its recipe, read from the
Makefile's `run:` target, so out/run holds a run before the tour starts). Each line must exit
0. A line is run exactly as printed but for these substitutions, and only these:

  1. `stallscope` (the first word) -> the built binary.
  2. `run` without --target and with the cpu engine (no --engine, or --engine cpu) ->
     `--engine emulate`: the cpu engine's warm start alone takes seconds to a minute.
  3. `run` (every one) -> `--duration 2s --inject-at 1s --warmup 500ms` appended: the lesson's
     40 s twice would take minutes; the lesson's own injection then falls inside the run.
  4. A URL naming HOST (`http://HOST:8000`) -> a `serve --engine emulate` this script starts
     on a free 127.0.0.1 port before the tour, torn down by its PID at the end.
  5. A `serve` line -> started in the background (`--engine emulate` added when it names no
     engine, --port a free port), torn down by its PID at the end.
  6. A file the line names that does not exist (`--trace my.csv`) -> a small trace written
     here under that name (Azure CSV for .csv, JSONL otherwise).

A line whose command this script does not know (calibrate, a new command) fails the test:
the README changed shape, and this script must learn the new line before it passes again."""

import os
import shlex
import socket
import subprocess
import sys
import time

SHORT_RUN = ["--duration", "2s", "--inject-at", "1s", "--warmup", "500ms"]
AS_PRINTED = {"model", "sim", "sweep", "tune", "report", "metrics", "help"}
LINE_TIMEOUT_S = 120


def fail(why):
    print("FAIL: " + why, file=sys.stderr)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tour_lines(readme):
    """The tour block's command lines, as printed."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    start = next((i for i, l in enumerate(lines)
                  if l.startswith("#") and "tour" in l.lower()), None)
    if start is None:
        fail("README.md has no heading with 'tour' in it: the test cannot find the tour")
    fence = next((i for i in range(start, len(lines)) if lines[i].startswith("```")), None)
    if fence is None:
        fail("no ``` block after the tour's heading")
    out = []
    for line in lines[fence + 1:]:
        if line.startswith("```"):
            return out
        if line.strip():
            out.append(line)
    fail("the tour's ``` block never ends")


def make_run_line(makefile):
    """The Makefile's `run:` recipe as a tour-style line (`stallscope run ...`)."""
    lines = open(makefile, encoding="utf-8").read().split("\n")
    at = next((i for i, l in enumerate(lines) if l.startswith("run:")), None)
    if at is None:
        fail("the Makefile has no run: target")
    for line in lines[at + 1:]:
        if not line.startswith("\t"):
            break
        words = shlex.split(line.strip())
        if words and words[0].endswith("/stallscope"):
            out = {"$(OUT)": "out/run"}
            return " ".join(["stallscope"] + [out.get(w, w) for w in words[1:]])
    fail("the Makefile's run: recipe starts no stallscope")


def write_trace(path):
    """Twenty short requests over two seconds, in the format the name suggests."""
    with open(path, "w", encoding="utf-8") as f:
        if path.endswith(".csv"):
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
            for i in range(20):
                f.write("2023-11-16 18:15:%02d.%d000000,%d,%d\n" % (46 + i // 10, i % 10, 200 + i, 20))
        else:
            for i in range(20):
                f.write('{"t": %.1f, "prompt_tokens": %d, "max_tokens": 20}\n' % (i / 10, 200 + i))


class Tour:
    def __init__(self, binary, scratch):
        self.binary = binary
        self.scratch = scratch
        self.servers = []  # (Popen, log file)
        self.host_url = None

    def start_server(self, args, label):
        """serve in the background on a free port; its URL once /health answers."""
        if "--engine" not in args:
            args = args + ["--engine", "emulate"]
        port = free_port()
        if "--port" in args:
            args[args.index("--port") + 1] = str(port)
        else:
            args = args + ["--port", str(port)]
        log = open(os.path.join(self.scratch, "serve-%d.log" % len(self.servers)), "w")
        proc = subprocess.Popen([self.binary] + args, cwd=self.scratch, stdout=log,
                                stderr=subprocess.STDOUT)
        self.servers.append((proc, log))
        url = "http://127.0.0.1:%d" % port
        for _ in range(300):  # 30 s at most
            if proc.poll() is not None:
                fail("%s: the server exited (%d)" % (label, proc.returncode))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return url
            except OSError:
                time.sleep(0.1)
        fail("%s: the server did not listen within 30 s" % label)

    def stop_servers(self):
        for proc, log in self.servers:
            if proc.poll() is None:
                proc.terminate()  # by its PID
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            log.close()

    def substitute(self, line):
        """The line's arguments after the substitutions above; None for a serve line."""
        words = shlex.split(line, comments=True)
        if not words or words[0] != "stallscope":
            fail("a tour line that is not a stallscope command: %r" % line)
        args = words[1:]
        if not args:
            fail("a bare `stallscope` line: %r" % line)
        command = args[0]
        for i, a in enumerate(args):
            if "HOST" in a:
                if self.host_url is None:
                    self.host_url = self.start_server(["serve"], "the server for HOST")
                args[i] = self.host_url
            elif i > 0 and args[i - 1] == "--trace" and not os.path.exists(
                    os.path.join(self.scratch, a)):
                write_trace(os.path.join(self.scratch, a))
        if command == "serve":
            self.start_server(args, line)
            return None
        if command == "run":
            if "--target" not in args:
                at = args.index("--engine") if "--engine" in args else -1
                if at < 0:
                    args += ["--engine", "emulate"]
                elif args[at + 1] == "cpu":
                    args[at + 1] = "emulate"
            return args + SHORT_RUN
        if command in AS_PRINTED and "--verify" not in args:
            return args
        fail("the tour has a line this test cannot map (teach readme_tour.py): %r" % line)

    def run_line(self, n, line):
        args = self.substitute(line)
        if args is None:
            print("ok: line %d started in the background: %s" % (n, line))
            return
        started = time.monotonic()
        try:
            done = subprocess.run([self.binary] + args, cwd=self.scratch, capture_output=True,
                                  text=True, timeout=LINE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail("line %d did not end within %d s: %s" % (n, LINE_TIMEOUT_S, line))
        if done.returncode != 0:
            print(done.stdout[-2000:], file=sys.stderr)
            print(done.stderr[-2000:], file=sys.stderr)
            fail("line %d exited %d: %s\n  (ran: stallscope %s)" %
                 (n, done.returncode, line, shlex.join(args)))
        print("ok: line %d (%.1f s): %s" % (n, time.monotonic() - started, line.split("#")[0].strip()))


def main():
    binary, scratch, readme, makefile = sys.argv[1:5]
    lines = tour_lines(readme)
    if len(lines) < 3:
        fail("the tour has %d lines: not the tour this test knows" % len(lines))
    tour = Tour(binary, scratch)
    try:
        tour.run_line(0, make_run_line(makefile) + "   # make run")
        for n, line in enumerate(lines, 1):
            tour.run_line(n, line)
    finally:
        tour.stop_servers()
    print("readme_tour: every one of the tour's %d lines exited 0" % len(lines))


if __name__ == "__main__":
    main()
