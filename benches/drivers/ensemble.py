"""The ensemble (preprocess_inception -> efficientnet_lite0) against the
client calling the two models one after the other, with the same client
(tritonclient.http, binary tensors), the same images and the same
concurrency, in one run against `trtis serve` on the example repository;
plus perf_analyzer on the ensemble over gRPC for reference.

Run it with scripts/bench.sh ensemble. Results: target/bench/ensemble-bench.md.
"""
import csv
import os
import subprocess
import sys
import threading
import time

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, PA, ROOT, Server  # noqa: E402

SECONDS = 6.0


def run(url, concurrency, call):
    """Requests per second with `concurrency` threads each looping `call`."""
    stop = time.perf_counter() + SECONDS
    counts = [0] * concurrency

    def worker(i):
        client = httpclient.InferenceServerClient(url)
        image = np.random.default_rng(i).integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
        call(client, image)  # warm-up
        while time.perf_counter() < stop:
            call(client, image)
            counts[i] += 1
        client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def ensemble(client, image):
    i = httpclient.InferInput("IMAGE", image.shape, "UINT8")
    i.set_data_from_numpy(image, binary_data=True)
    out = httpclient.InferRequestedOutput("CLASSES", binary_data=True)
    return client.infer("efficientnet_ensemble", [i], outputs=[out]).as_numpy("CLASSES")


def chain(client, image):
    i = httpclient.InferInput("IMAGE", image.shape, "UINT8")
    i.set_data_from_numpy(image, binary_data=True)
    pre = client.infer("preprocess_inception", [i],
                       outputs=[httpclient.InferRequestedOutput("INPUT", binary_data=True)]).as_numpy("INPUT")
    j = httpclient.InferInput("input", pre.shape, "FP32")
    j.set_data_from_numpy(pre, binary_data=True)
    out = httpclient.InferRequestedOutput("output", binary_data=True)
    return client.infer("efficientnet_lite0", [j], outputs=[out]).as_numpy("output")


def main():
    os.makedirs(OUT, exist_ok=True)
    server = Server(os.path.join(ROOT, "examples/model_repository"), 18250)
    url = f"127.0.0.1:{server.port}"
    client = httpclient.InferenceServerClient(url)
    image = np.random.default_rng(7).integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
    same = np.array_equal(ensemble(client, image), chain(client, image))
    lines = ["# Ensemble against the client-side chain", "",
             "efficientnet_ensemble (preprocess_inception then efficientnet_lite0 in the server) against the "
             "client sending the UINT8 image to preprocess_inception, receiving the FP32 tensor (588 KiB) and "
             "sending it to efficientnet_lite0; tritonclient.http with binary tensors for both, same images, "
             f"same run. Outputs identical: {same}.", "",
             "| concurrency | ensemble requests/s | client-side chain requests/s | ensemble / chain |",
             "| --- | --- | --- | --- |"]
    for c in (1, 4):
        e = run(url, c, ensemble)
        ch = run(url, c, chain)
        lines.append(f"| {c} | {e:.1f} | {ch:.1f} | {e / ch:.2f} |")
        print(lines[-1], flush=True)
    csv_path = os.path.join(OUT, "pa-ensemble.csv")
    r = subprocess.run([PA, "-m", "efficientnet_ensemble", "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
                        "--concurrency-range", "1:4:3", "-p", "3000", "-f", csv_path],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines.append("")
    if r.returncode == 0:
        lines.append("perf_analyzer on the ensemble over gRPC (random UINT8 input):")
        lines.append("")
        for row in csv.DictReader(open(csv_path)):
            lines.append(f"- concurrency {row['Concurrency']}: {float(row['Inferences/Second']):.1f} infer/s, "
                         f"p50 {int(row['p50 latency']) / 1000:.2f} ms")
    else:
        lines.append(f"perf_analyzer on the ensemble: exit {r.returncode}")
    server.stop()
    report = "\n".join(lines)
    print(report)
    open(os.path.join(OUT, "ensemble-bench.md"), "w").write(report + "\n")


if __name__ == "__main__":
    main()
