"""text_generator: a deterministic text generator of our own, NOT a real
language model. It is a word bigram model of corpus.txt (about 300 words):
each "token" is a word that followed the previous one in that text. It
exists to show a decoupled (streaming) text model served through Triton's
generate extension, gRPC streaming and the OpenAI-compatible API, without a
download: no real small language model ships inside a package on the
registries this project can reach.

Input `text_input` (the prompt). Outputs per response: `text_output` (the
new text), `num_input_tokens` (the prompt's words) and `num_output_tokens`
(the words in this response).

Request parameters (anything else is refused with an error response):
  max_tokens (int, default 16)     how many words to make
  temperature (number, default 1)  0: always the most frequent next word
  top_p (number, default 1)        nucleus sampling
  seed (int, default 0)            the sampler's seed: same request, same text
  frequency_penalty, presence_penalty (numbers, default 0)
  stop (string: one stop string, or a JSON array of them)
  stream (bool, default false)     one response per word; else one response
  token_delay_ms (int, default 0)  a pause before each word (demos, tests)
  id                               set by the generate route; ignored

The request ends early when the client cancels it (the response sender's
is_cancelled()); the model logs "text_generator: request cancelled after N
tokens" then."""

import json
import math
import os
import random
import re
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

KNOWN = {
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "stream",
    "token_delay_ms",
    "id",
}


def words(text):
    return re.findall(r"[A-Za-z']+|[.,:;!?]", text)


def join(prev_text, word):
    """The text a word adds after `prev_text` (no space before punctuation)."""
    if word in ".,:;!?" or not prev_text:
        return word
    return " " + word


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "corpus.txt")) as f:
            corpus = words(f.read())
        self.follow = {}
        for a, b in zip(corpus, corpus[1:]):
            nexts = self.follow.setdefault(a.lower(), {})
            nexts[b] = nexts.get(b, 0) + 1
        self.starts = sorted({w for w in corpus if w[0].isupper()})

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.answer, args=(request,), daemon=True).start()
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        try:
            self.generate(request, sender)
        except Exception as e:  # the request's own error, not the server's
            if not sender.is_cancelled():
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        try:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except pb_utils.TritonModelException:
            pass  # the request was cancelled and is closed

    def generate(self, request, sender):
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
        prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        params = json.loads(request.parameters())
        unknown = sorted(set(params) - KNOWN)
        if unknown:
            raise ValueError("text_generator does not support the parameter(s): " + ", ".join(unknown))
        max_tokens = int(params.get("max_tokens", 16))
        temperature = float(params.get("temperature", 1.0))
        top_p = float(params.get("top_p", 1.0))
        freq = float(params.get("frequency_penalty", 0.0))
        pres = float(params.get("presence_penalty", 0.0))
        stream = bool(params.get("stream", False))
        delay = int(params.get("token_delay_ms", 0)) / 1000.0
        stop = params.get("stop", [])
        if isinstance(stop, str):
            stop = json.loads(stop) if stop.startswith("[") else [stop]
        if max_tokens < 0 or temperature < 0 or not 0 < top_p <= 1:
            raise ValueError("max_tokens and temperature must be >= 0, top_p in (0, 1]")
        rng = random.Random(int(params.get("seed", 0)))
        prompt_words = words(prompt)
        # The context: the prompt's last word this model knows, else a start
        # word picked by the prompt's text.
        word = next((w for w in reversed(prompt_words) if w.lower() in self.follow), None)
        if word is None:
            word = self.starts[sum(prompt.encode()) % len(self.starts)]
            first = [word]
        else:
            first = []
        n_in = len(prompt_words)
        text = ""  # everything made so far
        sent = 0  # how much of it went out
        made = 0  # tokens in `text`
        counts = {}
        pending = 0  # tokens made but not yet sent
        while made < max_tokens:
            if sender.is_cancelled():
                pb_utils.Logger.log_info(f"text_generator: request cancelled after {made} tokens")
                return
            if delay:
                time.sleep(delay)
            if first:
                word = first.pop()
            else:
                word = self.next_word(word, counts, temperature, top_p, freq, pres, rng)
            text += join(text, word)
            made += 1
            pending += 1
            counts[word] = counts.get(word, 0) + 1
            cut = min((text.find(s) for s in stop if s and s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
                break
            # Hold back what could still become a stop string.
            hold = max((k for s in stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
            if stream and len(text) - hold > sent:
                self.send(sender, text[sent : len(text) - hold], n_in if sent == 0 else 0, pending)
                sent = len(text) - hold
                pending = 0
        if len(text) > sent or not stream or pending:
            self.send(sender, text[sent:], n_in if sent == 0 else 0, pending)

    def next_word(self, word, counts, temperature, top_p, freq, pres, rng):
        nexts = self.follow.get(word.lower())
        if not nexts:
            nexts = {w: 1 for w in self.starts}
        scored = []
        for w, c in sorted(nexts.items()):
            seen = counts.get(w, 0)
            scored.append((math.log(c) - freq * seen - pres * (seen > 0), w))
        if temperature == 0:
            return max(scored)[1]
        top = max(s for s, _ in scored)
        weights = sorted(((math.exp((s - top) / temperature), w) for s, w in scored), reverse=True)
        total = sum(p for p, _ in weights)
        kept, mass = [], 0.0
        for p, w in weights:
            kept.append((p, w))
            mass += p / total
            if mass >= top_p:
                break
        pick = rng.random() * sum(p for p, _ in kept)
        for p, w in kept:
            pick -= p
            if pick <= 0:
                return w
        return kept[-1][1]

    def send(self, sender, text, n_in, n_out):
        sender.send(
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_)),
                    pb_utils.Tensor("num_input_tokens", np.array([n_in], dtype=np.int32)),
                    pb_utils.Tensor("num_output_tokens", np.array([n_out], dtype=np.int32)),
                ]
            )
        )
