#!/usr/bin/env python3
"""The deployment files a sharded run relies on, checked without a cluster
(tests/integration/deploy_manifests.sh; docs/guide/shards.md shows each of them).

usage: check_deploy.py ROOT   (ROOT: the repository, or a copy of its deploy/ and docs/)

Prints one "ok"/"FAIL" line per check and exits 1 when any check failed."""
import re
import sys

import yaml

ROOT = sys.argv[1]
FAILED = []

SHOWN = [  # the files docs/guide/shards.md shows, each verbatim in a fenced block
    "deploy/slurm/submit.sh",
    "deploy/slurm/shards.sbatch",
    "deploy/slurm/merge.sbatch",
    "deploy/k8s/shards.yaml",
    "deploy/k8s/merge.yaml",
    "deploy/container/Dockerfile",
]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def read(rel):
    with open(f"{ROOT}/{rel}") as f:
        return f.read()


def job(rel):
    try:
        doc = yaml.safe_load(read(rel))
    except yaml.YAMLError as e:
        check(False, f"{rel} parses as YAML ({str(e).splitlines()[0]})")
        sys.exit(1)
    check(isinstance(doc, dict), f"{rel} parses as YAML")
    check(doc.get("apiVersion") == "batch/v1" and doc.get("kind") == "Job",
          f"{rel}: a batch/v1 Job")
    return doc


def pod(doc):
    return doc["spec"]["template"]["spec"]


def claim_mounts(spec):
    """{mountPath: claimName} of the container's mounts backed by a PersistentVolumeClaim."""
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    (c,) = spec["containers"]
    return {m["mountPath"]: claims[m["name"]] for m in c.get("volumeMounts", [])
            if m["name"] in claims}


# ---- the Indexed Job: one pod per shard, all at once, never retried ------------------------
shards = job("deploy/k8s/shards.yaml")
spec = shards["spec"]
n = spec.get("completions")
check(spec.get("completionMode") == "Indexed", "shards.yaml: completionMode Indexed")
check(isinstance(n, int) and n >= 2 and spec.get("parallelism") == n,
      f"shards.yaml: parallelism {spec.get('parallelism')} = completions {n} (every shard at once)")
check(spec.get("backoffLimit") == 0, "shards.yaml: backoffLimit 0 (a retried shard would start after t = 0)")
ps = pod(shards)
check(ps.get("restartPolicy") == "Never", "shards.yaml: restartPolicy Never")
(container,) = ps["containers"]
cmd = " ".join(container.get("command", []) + container.get("args", []))
env = {e["name"]: e.get("value") for e in container.get("env", [])}
check(f'--shard "$JOB_COMPLETION_INDEX/{n}"' in cmd,
      f"shards.yaml: the pod's index handed to --shard as $JOB_COMPLETION_INDEX/{n} (N = completions)")
check('--start-at "$START_AT"' in cmd and env.get("START_AT") == "START_AT_HERE",
      "shards.yaml: --start-at from START_AT, the placeholder START_AT_HERE the docs' sed replaces")
check('--target "$TARGET"' in cmd and bool(env.get("TARGET")), "shards.yaml: --target from TARGET")
mounts = claim_mounts(ps)
outs = re.findall(r'--out "([^"]*)/shard-\$JOB_COMPLETION_INDEX"', cmd)
check(len(outs) == 1 and outs[0] in mounts,
      f"shards.yaml: each shard's --out DIR/shard-$JOB_COMPLETION_INDEX on a claim's mount ({outs})")
labels = shards["spec"]["template"].get("metadata", {}).get("labels", {})
spread = ps.get("topologySpreadConstraints", [])
check(any(t.get("topologyKey") == "kubernetes.io/hostname"
          and t.get("labelSelector", {}).get("matchLabels") == labels for t in spread) and labels,
      "shards.yaml: pods spread over nodes (topologySpreadConstraints on the pods' own labels)")

# ---- the merge Job: the same volume, every shard ------------------------------------------
merge = job("deploy/k8s/merge.yaml")
mp = pod(merge)
check(merge["spec"].get("backoffLimit") == 0 and mp.get("restartPolicy") == "Never",
      "merge.yaml: backoffLimit 0, restartPolicy Never")
(mc,) = mp["containers"]
menv = {e["name"]: e.get("value") for e in mc.get("env", [])}
mmounts = claim_mounts(mp)
check(mc.get("command") == ["stallscope-merge"], "merge.yaml: runs stallscope-merge")
check(menv.get("SHARDS") == str(n), f"merge.yaml: SHARDS {menv.get('SHARDS')} = the shards' completions {n}")
check(outs and menv.get("RESULTS") == outs[0] and mmounts.get(outs[0]) == mounts.get(outs[0]),
      f"merge.yaml: RESULTS {menv.get('RESULTS')} on the shards' claim {mounts.get(outs[0]) if outs else None}")
check(container.get("image") == mc.get("image"), "merge.yaml: the shards' image")

# ---- the image ------------------------------------------------------------------------------
docker = read("deploy/container/Dockerfile")
check(re.search(r"^FROM debian:bookworm\b", docker, re.M) is not None, "Dockerfile: FROM Debian 12 (bookworm)")
check("bash scripts/deps.sh build" in docker and "make build" in docker,
      "Dockerfile: the Makefile's packages (scripts/deps.sh build) and its build")
check("install -m 0755 deploy/slurm/merge.sbatch /usr/local/bin/stallscope-merge" in docker
      and re.search(r"install -m 0755 \S+/stallscope /usr/local/bin/stallscope\b", docker) is not None,
      "Dockerfile: stallscope and stallscope-merge (deploy/slurm/merge.sbatch) on PATH")

# ---- Slurm ----------------------------------------------------------------------------------
sb = read("deploy/slurm/shards.sbatch")
sub = read("deploy/slurm/submit.sh")
check("i=$SLURM_ARRAY_TASK_ID" in sb and 'n=${SLURM_ARRAY_TASK_COUNT:?}' in sb
      and '--shard "$i/$n" --start-at "$START_AT"' in sb,
      "shards.sbatch: --shard TASK_ID/TASK_COUNT of the array, --start-at $START_AT")
check('--dependency="afterany:$array"' in sub and '--array="0-$((SHARDS - 1))"' in sub,
      "submit.sh: an array of SHARDS tasks, the merge after it with afterany")

# ---- one source: the docs show these very files ---------------------------------------------
guide = read("docs/guide/shards.md")
blocks = [m.group(1) for m in re.finditer(r"^```[a-z]*\n(.*?)^```$", guide, re.M | re.S)]
for rel in SHOWN:
    check(read(rel) in blocks, f"docs/guide/shards.md shows {rel} as it is")

sys.exit(1 if FAILED else 0)
