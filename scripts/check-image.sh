#!/usr/bin/env bash
# Builds the container image from the Dockerfile and runs it as
# deploy/base/deployment.yaml runs it, with podman, on a machine that can
# reach package registries but no container registry:
#
#   1. podman (+ crun, runc, netavark, iptables) and mmdebstrap from Debian,
#      installed with apt-get when missing (as root).
#   2. The runtime stage's base, the Dockerfile's final FROM
#      (debian:bookworm-slim), made once with mmdebstrap --variant=minbase
#      from Debian's packages, slimmed as Debian's official image is (no
#      docs, man pages or locales; apt keeps no caches), cached as
#      .tools/image-base/debian-SUITE-slim.tar and imported under the
#      FROM's own name, docker.io/library/debian:SUITE-slim. An image of
#      that name that is already there (the real one, where it could be
#      pulled) is used as it is.
#   3. The build stage's output: scripts/runtime-layout.sh --assemble-only
#      assembles /stage/opt/trtis from this checkout, which is what the
#      build stage runs (on its own cargo build and wheels). The Dockerfile
#      is built unchanged with `podman build --build-context build=DIR`: the
#      final stage's `COPY --from=build /stage/opt/trtis` reads DIR instead
#      of the build stage, which is not built (no rust image to pull).
#      --pull=never: nothing comes from a container registry. The final
#      stage's own RUN (apt-get install python3 ca-certificates) runs as in
#      any build, from Debian's mirror.
#   4. The container, as the Deployment runs it (read from the manifest):
#      its user, group and fsGroup, read-only root filesystem with a tmpfs
#      where it mounts an emptyDir (/tmp), no privilege escalation, all
#      capabilities dropped, the CPU and memory limits, its args after the
#      image's ENTRYPOINT, its container ports published on 127.0.0.1. The
#      models simple (ONNX Runtime), add_sub (Python) and
#      efficientnet_lite0_openvino (OpenVINO) from examples/model_repository
#      are mounted read-only at /models (as deploy/overlays/pvc does).
#   5. Waits for the readiness probe's path, checks the liveness path and
#      the image's HEALTHCHECK command, then tritonclient (.venv) over HTTP
#      and gRPC: server and models ready, simple and add_sub over HTTP,
#      simple and efficientnet_lite0_openvino over gRPC, /metrics has the
#      HPA's series.
#   6. Stops it as Kubernetes does: the preStop command (podman exec), then
#      SIGTERM; requires not-ready at once and exit code 0 within
#      terminationGracePeriodSeconds (counted from the preStop, as the
#      kubelet counts it).
#   7. Prints the image's size and its layers'.
#
# Containers and temporary files are removed at exit; the base (tar and
# image) and the built image (localhost/trtis:check, or TRTIS_IMAGE) stay.
#
#   scripts/check-image.sh [--rebuild-base]
#
# TRTIS_BIN: the server binary (default target/release/trtis if built, else
# target/debug/trtis); the Python worker's lib_trtis_native.so is taken from
# beside it (scripts/runtime-layout.sh). TRTIS_DEBIAN_MIRROR and
# TRTIS_DEBIAN_SECURITY_MIRROR: where mmdebstrap fetches from.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
started=$(date +%s.%N)

say() { echo "check-image: $*"; }
die() { echo "check-image: FAIL: $*" >&2; exit 1; }
since() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(date +%s.%N)"; }

rebuild_base=0
while [ $# -gt 0 ]; do
  case $1 in
    --rebuild-base) rebuild_base=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-image: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

IMAGE=${TRTIS_IMAGE:-localhost/trtis:check}
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || die "no $PY (scripts/setup.sh makes it, with tritonclient)"
"$PY" -c 'import tritonclient.http, tritonclient.grpc' 2>/dev/null \
  || die "$PY lacks tritonclient[http,grpc] (scripts/setup.sh installs it)"
# PyYAML, to read the Deployment: .venv has it through its test tools,
# .venv-deploy (scripts/check-deploy.sh) through kubernetes-validate.
YPY=""
for p in "$PY" "$ROOT/.venv-deploy/bin/python" python3; do
  if "$p" -c 'import yaml' 2>/dev/null; then YPY=$p; break; fi
done
[ -n "$YPY" ] || die "no Python with PyYAML (.venv, .venv-deploy or python3) to read deploy/base/deployment.yaml"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trtis-image.XXXXXX")
ctr=""
cleanup() {
  if [ -n "$ctr" ]; then podman rm -f -t 0 "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# ------------------------------------------------------------- 1. tools
t=$(date +%s.%N)
missing=()
command -v podman >/dev/null || missing+=(podman crun runc netavark aardvark-dns iptables)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "${missing[*]} missing: install them (apt-get install ${missing[*]}) or run as root"
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$tmp/apt.log" 2>&1; }
  if ! apt_install; then
    apt-get update -qq >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log" >&2; die "apt-get update"; }
    apt_install || { cat "$tmp/apt.log" >&2; die "apt-get install ${missing[*]}"; }
  fi
  say "installed in $(since "$t") s: $(podman --version), mmdebstrap $(mmdebstrap --version | awk '{print $2}')"
fi
# (Its first run sets up podman's storage and network backend.)
podman info >"$tmp/podman-info.log" 2>&1 || { cat "$tmp/podman-info.log" >&2; die "podman info"; }

# --------------------------------------------------------------- 2. base
# The final stage's FROM, e.g. debian:bookworm-slim.
base=$(awk 'toupper($1) == "FROM" { f = $2 } END { print f }' Dockerfile)
suite=$(sed -n 's/^debian:\([a-z]*\)-slim$/\1/p' <<<"$base")
[ -n "$suite" ] || die "the Dockerfile's final stage is FROM $base, not debian:SUITE-slim: this script makes only Debian bases"
base_ref=docker.io/library/$base
cache=.tools/image-base/debian-$suite-slim.tar
base_label=org.trtis.check-image.base

t=$(date +%s.%N)
if [ "$rebuild_base" = 1 ]; then
  rm -f "$cache"
  if [ -n "$(podman image inspect --format "{{index .Labels \"$base_label\"}}" "$base_ref" 2>/dev/null)" ]; then
    podman rmi -f "$base_ref" >/dev/null
  fi
fi
if podman image exists "$base_ref"; then
  if [ -n "$(podman image inspect --format "{{index .Labels \"$base_label\"}}" "$base_ref")" ]; then
    say "base: $base_ref, made here with mmdebstrap ($cache; --rebuild-base remakes it)"
  else
    say "base: $base_ref as found in podman's storage (not made here)"
  fi
else
  if [ ! -s "$cache" ]; then
    mirror=${TRTIS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    security=${TRTIS_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    say "making $base's root filesystem with mmdebstrap --variant=minbase $suite (from $mirror)"
    # Debian's official slim images (debuerreotype): no documentation, man
    # pages or translations (dpkg path-exclude, kept in the image so the
    # final stage's apt-get installs slim too), and apt keeps no package
    # caches (their /etc/apt/apt.conf.d/docker-*). Made as a directory and
    # packed here: the apt files go in after mmdebstrap's own apt runs,
    # whose hooks would otherwise run their commands on this machine.
    rootfs=$tmp/rootfs
    mkdir -p "$(dirname "$cache")"
    if ! mmdebstrap --variant=minbase --mode=root --format=directory \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/linda/*' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$suite" "$rootfs" \
        "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main" \
        >"$tmp/mmdebstrap.log" 2>&1; then
      cat "$tmp/mmdebstrap.log" >&2
      die "mmdebstrap $suite"
    fi
    conf=$rootfs/etc/apt/apt.conf.d
    cat >"$conf/docker-clean" <<'EOF2'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF2
    echo 'Acquire::Languages "none";' >"$conf/docker-no-languages"
    echo 'Acquire::GzipIndexes "true";' >"$conf/docker-gzip-indexes"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$conf/docker-autoremove-suggests"
    rm -f "$rootfs"/var/cache/apt/*.bin
    tar --numeric-owner --xattrs --xattrs-include='*' -C "$rootfs" -cf "$cache.part" . \
      || die "packing $rootfs"
    rm -rf "$rootfs"
    mv "$cache.part" "$cache"
  fi
  podman import --quiet \
    --change 'CMD ["bash"]' \
    --change "LABEL $base_label=\"mmdebstrap --variant=minbase $suite, by scripts/check-image.sh, not Docker Hub's image\"" \
    "$cache" "$base_ref" >/dev/null || die "podman import $cache"
  say "base: $base_ref imported from $cache ($(du -m "$cache" | cut -f1) MB) in $(since "$t") s"
fi

# The OCI runtime and rlimits this machine allows. crun refuses cgroup v1
# hosts whose cgroup2 hierarchy holds controllers ("hybrid mode"), runc does
# not; podman's default rlimits (1048576 files and processes) need
# CAP_SYS_RESOURCE where the hard limits are lower.
ulimit_n=$(ulimit -Hn); [ "$ulimit_n" = unlimited ] && ulimit_n=1048576
ulimit_u=$(ulimit -Hu); [ "$ulimit_u" = unlimited ] && ulimit_u=1048576
pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
[ "$ulimit_u" -le "$pid_max" ] || ulimit_u=$pid_max
podman_rt=() run_limits=() probe_errors=""
found=0
for rt in "" runc; do
  for lim in "" "--ulimit nofile=$ulimit_n:$ulimit_n --ulimit nproc=$ulimit_u:$ulimit_u"; do
    rt_args=(); [ -z "$rt" ] || rt_args=(--runtime "$rt")
    # shellcheck disable=SC2206
    lim_args=($lim)
    if out=$(podman "${rt_args[@]}" run --rm --pull=never --network=none "${lim_args[@]}" "$base_ref" true 2>&1); then
      podman_rt=("${rt_args[@]}") run_limits=("${lim_args[@]}")
      found=1
      break 2
    fi
    probe_errors="$probe_errors
  runtime ${rt:-default}, ${lim:-default rlimits}: $out"
  done
done
if [ "$found" = 0 ]; then
  command -v runc >/dev/null || probe_errors="$probe_errors
  (runc is not installed: apt-get install runc may help)"
  die "podman cannot run a container here:$probe_errors"
fi
if [ -n "$probe_errors" ]; then
  say "podman runs containers here with ${podman_rt[*]:-the default runtime} and ${run_limits[*]:-the default rlimits}; what failed before:$probe_errors"
fi

# ------------------------------------------------------ 3. build stage output
t=$(date +%s.%N)
if [ -z "${TRTIS_BIN:-}" ]; then
  if [ -x target/release/trtis ]; then TRTIS_BIN=$ROOT/target/release/trtis; else TRTIS_BIN=$ROOT/target/debug/trtis; fi
fi
[ -x "$TRTIS_BIN" ] || die "no server binary at $TRTIS_BIN (cargo build --release --locked, or set TRTIS_BIN)"
layout=$tmp/build
TRTIS_BIN="$TRTIS_BIN" scripts/runtime-layout.sh --assemble-only "$layout/stage" >"$tmp/layout.log" 2>&1 \
  || { cat "$tmp/layout.log" >&2; die "scripts/runtime-layout.sh --assemble-only"; }
say "build stage stood in for by scripts/runtime-layout.sh ($TRTIS_BIN): $(sed -n 's/^runtime-layout: layout size: //p' "$tmp/layout.log") in $(since "$t") s"

# ------------------------------------------------------------- 4. build
t=$(date +%s.%N)
old_id=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
# --format docker keeps HEALTHCHECK, SHELL and STOPSIGNAL (OCI's image
# format has no field for the first two).
if ! podman "${podman_rt[@]}" build --pull=never --format docker \
    --build-context build="$layout" -f Dockerfile -t "$IMAGE" . >"$tmp/build.log" 2>&1; then
  cat "$tmp/build.log" >&2
  die "podman build (the Dockerfile's final stage on $base_ref, the build stage replaced by the layout)"
fi
grep -q '^\[1/2\]' "$tmp/build.log" && { cat "$tmp/build.log" >&2; die "podman build ran the build stage"; }
new_id=$(podman image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then podman rmi "$old_id" >/dev/null 2>&1 || true; fi
cached=$(grep -c -- '--> Using cache' "$tmp/build.log" || true)
say "built $IMAGE (${new_id:0:12}) from the Dockerfile's final stage in $(since "$t") s ($cached steps from podman's layer cache)"

# ------------------------------------------------------------- 5. run
# The Deployment's pod, as podman arguments.
"$YPY" - deploy/base/deployment.yaml "$(nproc)" >"$tmp/pod.sh" <<'EOF' || die "reading deploy/base/deployment.yaml"
import re, shlex, sys
import yaml

dep = yaml.safe_load(open(sys.argv[1]))
cpus = int(sys.argv[2])
pod = dep["spec"]["template"]["spec"]
(c,) = pod["containers"]
psc, sc = pod.get("securityContext", {}), c.get("securityContext", {})
args = []
uid, gid = psc.get("runAsUser"), psc.get("runAsGroup", psc.get("runAsUser"))
if not psc.get("runAsNonRoot") or not uid:
    sys.exit("the pod does not run as a numeric non-root user")
args += ["--user", f"{uid}:{gid}"]
if "fsGroup" in psc:
    args += ["--group-add", str(psc["fsGroup"])]
if sc.get("readOnlyRootFilesystem"):
    # Only what the pod mounts is writable (not podman's /run, /var/tmp).
    args += ["--read-only", "--read-only-tmpfs=false"]
if sc.get("allowPrivilegeEscalation") is False:
    args += ["--security-opt", "no-new-privileges"]
for cap in sc.get("capabilities", {}).get("drop", []):
    args += ["--cap-drop", cap]
for cap in sc.get("capabilities", {}).get("add", []):
    args += ["--cap-add", cap]
vols = {v["name"]: v for v in pod.get("volumes", [])}
for m in c.get("volumeMounts", []):
    v = vols[m["name"]]
    if "emptyDir" not in v:
        sys.exit(f"volume {m['name']}: only emptyDir is stood in for (by a tmpfs)")
    size = v["emptyDir"].get("sizeLimit", "")
    size = re.sub(r"([KMGT])i$", lambda g: g.group(1).lower(), size)
    args += ["--tmpfs", f"{m['mountPath']}:rw,mode=1777" + (f",size={size}" if size else "")]
lim = c.get("resources", {}).get("limits", {})
if "cpu" in lim:
    q = str(lim["cpu"])
    q = float(q[:-1]) / 1000 if q.endswith("m") else float(q)
    args += ["--cpus", str(min(q, cpus))]
if "memory" in lim:
    mem = re.sub(r"([KMGT])i$", lambda g: g.group(1).lower(), str(lim["memory"]))
    args += ["--memory", mem, "--memory-swap", mem]
ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
for p in ports.values():
    args += ["-p", f"127.0.0.1::{p}"]
def probe(name):
    g = c[name]["httpGet"]
    return g["path"], ports.get(g["port"], g["port"])
pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
out = {
    "pod_args": args,
    "ctr_args": c.get("args", []),
    "prestop": pre,
}
for k, v in out.items():
    print(f"{k}=({' '.join(shlex.quote(str(a)) for a in v)})")
ready_path, ready_port = probe("readinessProbe")
live_path, live_port = probe("livenessProbe")
print(f"ready_path={shlex.quote(ready_path)} ready_port={ready_port}")
print(f"live_path={shlex.quote(live_path)} live_port={live_port}")
print(f"grace={pod.get('terminationGracePeriodSeconds', 30)}")
print(f"grpc_port={ports['grpc']} metrics_port={ports['metrics']}")
EOF
pod_args=() ctr_args=() prestop=() ready_path="" ready_port="" live_path="" live_port=""
grace="" grpc_port="" metrics_port=""
# shellcheck disable=SC1091
. "$tmp/pod.sh"

models=$tmp/models
mkdir -p "$models"
for m in simple add_sub efficientnet_lite0_openvino; do cp -r "examples/model_repository/$m" "$models/"; done
chmod -R a+rX "$tmp"

t=$(date +%s.%N)
ctr=trtis-check-image-$$
# --no-healthcheck: podman would schedule the HEALTHCHECK with systemd
# timers (absent here); its command is run below with podman exec instead.
podman "${podman_rt[@]}" run -d --name "$ctr" --pull=never --no-healthcheck \
  "${run_limits[@]}" "${pod_args[@]}" -v "$models:/models:ro" \
  "$IMAGE" "${ctr_args[@]}" >/dev/null || die "podman run $IMAGE"
say "running $ctr: podman run ${pod_args[*]} -v MODELS:/models:ro $IMAGE ${ctr_args[*]}"
hostport() { podman port "$ctr" "$1/tcp" | sed -n '1s/.*://p'; }
http=$(hostport "$ready_port")
grpc=$(hostport "$grpc_port")
metrics=$(hostport "$metrics_port")
live=$(hostport "$live_port")
fail_run() { podman logs "$ctr" 2>&1 | tail -40 >&2; die "$*"; }

status_of() {  # HTTP status of GET 127.0.0.1:PORT/PATH, or 000
  "$PY" -c '
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")' "$1" "$2"
}
code=000
for _ in $(seq 240); do
  code=$(status_of "$http" "$ready_path")
  [ "$code" = 200 ] && break
  [ "$(podman inspect --format '{{.State.Running}}' "$ctr")" = true ] \
    || fail_run "the container exited at start (exit code $(podman inspect --format '{{.State.ExitCode}}' "$ctr"))"
  sleep 0.5
done
[ "$code" = 200 ] || fail_run "readiness probe $ready_path did not answer 200 within 120 s (last: $code)"
say "ok: readiness probe $ready_path 200 after $(since "$t") s; liveness $live_path $(status_of "$live" "$live_path")"

hc=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE")
mapfile -t hc_cmd < <("$PY" -c 'import json, sys; t = json.loads(sys.argv[1]); assert t[0] == "CMD", t; print("\n".join(t[1:]))' "$hc") \
  || die "the image has no exec-form HEALTHCHECK ($hc)"
podman exec "$ctr" "${hc_cmd[@]}" >"$tmp/hc.log" 2>&1 || { cat "$tmp/hc.log" >&2; fail_run "HEALTHCHECK ${hc_cmd[*]} failed"; }
say "ok: HEALTHCHECK ${hc_cmd[*]} exits 0"

"$PY" - "$http" "$grpc" "$metrics" <<'EOF' || fail_run "the tritonclient checks failed"
import sys, urllib.request
import numpy as np
import tritonclient.http as httpclient
import tritonclient.grpc as grpcclient

http_port, grpc_port, metrics_port = sys.argv[1:4]
h = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
g = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
models = ["simple", "add_sub", "efficientnet_lite0_openvino"]
assert h.is_server_live() and h.is_server_ready(), "HTTP: server not live/ready"
assert g.is_server_live() and g.is_server_ready(), "gRPC: server not live/ready"
for m in models:
    assert h.is_model_ready(m) and g.is_model_ready(m), f"{m} not ready"

def simple(client, mod):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    r = client.infer("simple", inputs)
    assert (r.as_numpy("OUTPUT0") == a + b).all() and (r.as_numpy("OUTPUT1") == a - b).all(), r.get_response()

simple(h, httpclient)
print("check-image: ok: HTTP: server and models ready; simple (onnxruntime) OUTPUT0 = INPUT0 + INPUT1")
x, y = np.array([1, 2, 3, 4], np.float32), np.full(4, 0.5, np.float32)
inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
inputs[0].set_data_from_numpy(x)
inputs[1].set_data_from_numpy(y)
r = h.infer("add_sub", inputs)
assert (r.as_numpy("OUTPUT0") == x + y).all() and (r.as_numpy("OUTPUT1") == x - y).all(), r.get_response()
print("check-image: ok: HTTP: add_sub (python backend: the image's python3, the venv's numpy, /tmp on the read-only root)")

simple(g, grpcclient)
inp = grpcclient.InferInput("input", [1, 3, 224, 224], "FP32")
inp.set_data_from_numpy(np.zeros((1, 3, 224, 224), np.float32))
r = g.infer("efficientnet_lite0_openvino", [inp])
out = r.as_numpy("output")
assert out.shape == (1, 1000) and np.isfinite(out).all(), out.shape
print("check-image: ok: gRPC: simple, and efficientnet_lite0_openvino (OpenVINO) 1000 class scores")

text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
assert 'nv_inference_pending_request_count{model="simple",version="1"}' in text, "no HPA series on /metrics"
print("check-image: ok: metrics port: /metrics has nv_inference_pending_request_count (the HPA's metric)")
EOF

# ------------------------------------------------------------ 6. stop
# The kubelet runs preStop, then sends the stop signal; the grace period
# counts from the preStop's start.
t=$(date +%s.%N)
if [ ${#prestop[@]} -gt 0 ]; then
  podman exec "$ctr" "${prestop[@]}" || fail_run "preStop ${prestop[*]} failed in the container"
fi
pre_s=$(since "$t")
podman kill --signal TERM "$ctr" >/dev/null || fail_run "podman kill --signal TERM"
term=$(date +%s.%N)
code=200
for _ in $(seq 20); do
  code=$(status_of "$http" "$ready_path")
  [ "$code" = 200 ] || break
  sleep 0.1
done
[ "$code" != 200 ] || fail_run "still ready 2 s after SIGTERM"
left=$(python3 -c "import math, sys; print(max(1, math.floor($grace - float(sys.argv[1]))))" "$pre_s")
if ! timeout "$left" podman wait "$ctr" >/dev/null; then
  fail_run "did not exit within terminationGracePeriodSeconds ($grace s, ${pre_s} s of them in preStop)"
fi
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$ctr")
oom=$(podman inspect --format '{{.State.OOMKilled}}' "$ctr")
[ "$exit_code" = 0 ] || fail_run "exited $exit_code after SIGTERM (OOMKilled: $oom)"
podman logs "$ctr" >"$tmp/ctr.log" 2>&1
grep -q "shutting down" "$tmp/ctr.log" || fail_run "no drain (\"shutting down\") in the log"
say "ok: preStop ${prestop[*]} (${pre_s} s), SIGTERM: not ready ($code) at once, drained and exited 0 in $(since "$term") s (grace ${grace} s)"
podman rm "$ctr" >/dev/null
ctr=""

# ------------------------------------------------------------- 7. size
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
layers=$(podman history --format '{{.Size}}\t{{.CreatedBy}}' "$IMAGE" | awk -F'\t' '$1 != "0 B" {
  what = $2
  if (what ~ /ADD file/) what = "base"
  else if (what ~ /apt-get/) what = "apt-get (python3, ca-certificates)"
  else if (what ~ /COPY/) what = "/opt/trtis"
  out = (out ? what ": " $1 ", " out : what ": " $1)
} END { print out }')
say "image $IMAGE: $((size / 1000000)) MB ($layers), server binary $(basename "$(dirname "$TRTIS_BIN")")"
say "done in $(since "$started") s"
