#!/usr/bin/env python3
"""The peer engine of the benchmark matrix (issue 7): Hugging Face
transformers' continuous batching on the same GPU, with the same shapes and
the same definitions as `troupe bench` (docs/bench.md, "Peer: transformers").

  offline   as `troupe bench throughput --dataset random`: every prompt in
            one batch through transformers' ContinuousBatchingManager (the
            loop of `generate_batch`, started and warmed up before the clock
            starts), or `--api generate_batch` (one timed `generate_batch`
            call, its own start-up included)
  latency   as `troupe bench latency`: one batch of B random prompts, repeated;
            latency, prefill time (until every request has its first token)
            and decode time per iteration
  serve     an OpenAI-compatible /v1/completions server (token-id prompts,
            streamed, usage chunk) over one ContinuousBatchingManager, for
            `troupe bench serve`; Python's standard http.server, no tokenizer
  check     prints the versions and whether the API this script needs is there

The model has random weights in the shape of a config.json (`--model-config
DIR`), bf16, on the GPU, EOS ignored (eos_token_id -1). Sampling as troupe's
bench: temperature 1, top_p 1, no top_k (`--greedy` for argmax).

Needs torch and transformers >= 5 with `transformers.generation.
ContinuousBatchingConfig` (written against 5.17.0, the GPU host's version);
prompt generation, statistics and JSON need neither (the module imports torch
only when a model is built).
"""
import argparse
import dataclasses
import datetime
import inspect
import itertools
import json
import math
import os
import queue
import signal
import sys
import threading
import time

# --------------------------------------------------------------------------
# Prompts: cli/bench/datasets.cpp's bench_rng (std::mt19937_64 with its
# distributions written out), so the same seed gives troupe's token ids.

MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64 (the C++ standard's parameters)."""

    N, M = 312, 156

    def __init__(self, seed):
        mt = [0] * self.N
        mt[0] = seed & MASK64
        for i in range(1, self.N):
            mt[i] = (6364136223846793005 * (mt[i - 1] ^ (mt[i - 1] >> 62)) + i) & MASK64
        self.mt = mt
        self.index = self.N

    def _twist(self):
        mt, n, m = self.mt, self.N, self.M
        for i in range(n):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % n] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + m) % n] ^ xa
        self.index = 0

    def next(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


class BenchRng:
    """bench_rng::uniform_int (rejection sampling, inclusive bounds)."""

    def __init__(self, seed):
        self.gen = MT19937_64(seed)

    def uniform_int(self, lo, hi):
        rng = (hi - lo + 1) & MASK64
        if rng == 0:
            x = self.gen.next()
            return x - (1 << 64) if x >= 1 << 63 else x
        limit = MASK64 - MASK64 % rng
        x = self.gen.next()
        while x >= limit:
            x = self.gen.next()
        return lo + x % rng


def length_range(length, ratio):
    """vLLM's floor(len (1 - r)) .. ceil(len (1 + r))."""
    return int(math.floor(length * (1.0 - ratio))), int(math.ceil(length * (1.0 + ratio)))


def random_dataset(num_prompts, input_len, output_len, range_ratio, vocab_size, seed):
    """`--dataset random` with token-id prompts and no tokenizer (every id of
    [0, vocab_size) allowed): [(prompt_ids, max_new_tokens)], as troupe's
    synthetic() draws them: input lengths, output lengths, offsets, then
    prompt i = (offset_i + i + j) mod V."""
    if num_prompts < 1:
        raise ValueError("--num-prompts: must be >= 1")
    if not 0 <= range_ratio < 1:
        raise ValueError("--range-ratio: must be in [0, 1)")
    if input_len < 0 or output_len < 1:
        raise ValueError("--input-len must be >= 0 and --output-len >= 1")
    rng = BenchRng(seed)
    in_lo, in_hi = length_range(input_len, range_ratio)
    out_lo, out_hi = length_range(output_len, range_ratio)
    out_lo = max(out_lo, 1)
    input_lens = [rng.uniform_int(in_lo, in_hi) for _ in range(num_prompts)]
    output_lens = [rng.uniform_int(out_lo, out_hi) for _ in range(num_prompts)]
    offsets = [rng.uniform_int(0, vocab_size - 1) for _ in range(num_prompts)]
    return [([(offsets[i] + i + j) % vocab_size for j in range(input_lens[i])], output_lens[i])
            for i in range(num_prompts)]


def latency_batch(batch_size, input_len, vocab_size, seed, iteration):
    """bench_latency.cpp's make_batch: ids uniform in [0, min(V, 10000))."""
    rng = BenchRng((seed * 1000003 + iteration) & MASK64)
    top = min(vocab_size, 10000) - 1
    return [[rng.uniform_int(0, top) for _ in range(input_len)] for _ in range(batch_size)]


# --------------------------------------------------------------------------
# Statistics: cli/bench/metrics.cpp (numpy's mean, population std, linear
# percentiles).

LATENCY_PERCENTILES = [10, 25, 50, 75, 90, 99]


def percentile_sorted(s, p):
    pos = (len(s) - 1) * (p / 100.0)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    t = pos - lo
    a, b = s[lo], s[hi]
    return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t


def percentile_name(p):
    return str(int(p)) if float(p).is_integer() else repr(float(p))


def summarize(values, percentiles=LATENCY_PERCENTILES):
    if not values:
        return {"mean": 0.0, "std": 0.0, "percentiles": [(p, 0.0) for p in percentiles]}
    s = sorted(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((x - mean) ** 2 for x in values) / len(values))
    return {"mean": mean, "std": std, "percentiles": [(p, percentile_sorted(s, p)) for p in percentiles]}


# --------------------------------------------------------------------------
# Reports: troupe's stdout lines (so bench_matrix.sh reads both alike) and
# its JSON keys.


def iso_date_now():
    return datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")


def write_json(path, obj):
    if not path:
        return
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def throughput_report(result, prompts, engine_name, engine_settings, args):
    """`troupe bench throughput`'s stdout and JSON (bench_throughput.cpp)."""
    n = len(prompts)
    prompt_tokens = sum(len(p) for p, _ in prompts)
    output_tokens = sum(result["output_tokens"])
    elapsed = result["elapsed"]
    failed = sum(1 for e in result["errors"] if e)
    print(f"Throughput: {n / elapsed:.2f} requests/s, {(prompt_tokens + output_tokens) / elapsed:.2f} "
          f"total tokens/s, {output_tokens / elapsed:.2f} output tokens/s")
    print(f"Total num prompt tokens:  {prompt_tokens}")
    print(f"Total num output tokens:  {output_tokens}")
    print(f"Elapsed time (s):  {elapsed:.3f}")
    print("Prefix cache hit rate:  n/a")
    print("Preemptions:  n/a")
    print(f"Engine: {engine_name} ({result['timing']})")
    sys.stdout.flush()
    return {
        "date": iso_date_now(),
        "engine": engine_name,
        "elapsed_time": elapsed,
        "num_requests": n,
        "failed": failed,
        "total_prompt_tokens": prompt_tokens,
        "total_output_tokens": output_tokens,
        "total_num_tokens": prompt_tokens + output_tokens,
        "requests_per_second": n / elapsed,
        "tokens_per_second": (prompt_tokens + output_tokens) / elapsed,
        "output_tokens_per_second": output_tokens / elapsed,
        "prefix_cache_hit_rate": None,
        "num_preemptions": None,
        "timing": result["timing"],
        "startup_time": result.get("startup"),
        "engine_settings": engine_settings,
        "flags": vars(args),
        "command_line": sys.argv,
        "output_lens": result["output_tokens"],
        "errors": result["errors"],
    }


def latency_report(latencies, prefills, decodes, engine_name, engine_settings, args, prefill_method):
    """`troupe bench latency`'s stdout and JSON (bench_latency.cpp)."""

    def print_series(name, values):
        d = summarize(values)
        print(f"Avg {name}: {d['mean']:.6f} seconds")
        print(f"Std {name}: {d['std']:.6f} seconds")
        for p, v in d["percentiles"]:
            print(f"{percentile_name(p)}% percentile {name}: {v:.6f} seconds")

    print_series("latency", latencies)
    print_series("prefill time", prefills)
    print_series("decode time", decodes)
    decode_ms = (summarize(decodes)["mean"] * 1000.0 / (args.output_len - 1)) if args.output_len > 1 else 0.0
    print(f"Avg decode time per output token (ms): {decode_ms:.3f}")
    print(f"Engine: {engine_name} (prefill time from {prefill_method})")
    sys.stdout.flush()
    out = {
        "date": iso_date_now(),
        "engine": engine_name,
        "batch_size": args.batch_size,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "num_iters": args.num_iters,
        "num_iters_warmup": args.num_iters_warmup,
    }

    def series(name, plural, values):
        d = summarize(values)
        out["avg_" + name] = d["mean"]
        out["std_" + name] = d["std"]
        out[plural] = values
        out[name + "_percentiles"] = {percentile_name(p): v for p, v in d["percentiles"]}

    series("latency", "latencies", latencies)
    out["percentiles"] = dict(out["latency_percentiles"])  # vLLM's key
    series("prefill_time", "prefill_times", prefills)
    series("decode_time", "decode_times", decodes)
    out["avg_decode_ms_per_output_token"] = decode_ms
    out["prefill_method"] = prefill_method
    out["engine_settings"] = engine_settings
    out["flags"] = vars(args)
    out["command_line"] = sys.argv
    return out


# --------------------------------------------------------------------------
# transformers


def die(msg, code=1):
    print(f"peer_transformers: {msg}", file=sys.stderr)
    sys.exit(code)


def import_stack():
    """torch and transformers, or a clear exit."""
    try:
        import torch
    except ImportError as e:
        die(f"cannot import torch ({e}); run this on the GPU host, whose python3 has torch and transformers")
    try:
        import transformers
    except ImportError as e:
        die(f"cannot import transformers ({e}); torch {torch.__version__} is there but transformers is not")
    version = transformers.__version__
    try:
        from transformers.generation import ContinuousBatchingConfig, GenerationConfig
    except ImportError:
        die(f"transformers {version} has no transformers.generation.ContinuousBatchingConfig: this script needs "
            "the continuous batching API of transformers 5 (written against 5.17.0)")
    # Continuous batching is a mixin of generation (ContinuousMixin, through
    # GenerationMixin), which causal-LM classes inherit; PreTrainedModel does not.
    generation_mixin = getattr(transformers, "GenerationMixin", None)
    if generation_mixin is None or not hasattr(generation_mixin, "init_continuous_batching"):
        die(f"transformers {version}: GenerationMixin has no init_continuous_batching (continuous batching API)")
    if int(version.split(".")[0]) < 5:
        die(f"transformers {version}: this script needs transformers >= 5 (written against 5.17.0)")
    return torch, transformers, ContinuousBatchingConfig, GenerationConfig


def named_params(fn):
    """The parameters a callable names (not its **kwargs: add_request sends
    those to the logits processors)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def call_with_known(fn, **kwargs):
    known = named_params(fn)
    return fn(**{k: v for k, v in kwargs.items() if k in known})


def is_final(out):
    status = getattr(getattr(out, "status", None), "name", str(getattr(out, "status", "")))
    return status in ("FINISHED", "FAILED") or bool(getattr(out, "error", None))


def failure(out):
    err = getattr(out, "error", None)
    status = getattr(getattr(out, "status", None), "name", "")
    if err:
        return str(err)
    return "request failed" if status == "FAILED" else ""


def jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return str(v)


class PeerEngine:
    """A model with random weights and one running ContinuousBatchingManager;
    a dispatcher thread routes each GenerationOutput to its request's queue
    and stamps when it arrived."""

    def __init__(self, args):
        torch, transformers, CBConfig, GenConfig = import_stack()
        self.torch = torch
        self.args = args
        self.version = transformers.__version__
        self.name = f"transformers {self.version}"
        if not torch.cuda.is_available():
            die(f"torch {torch.__version__} sees no CUDA device")
        config = transformers.AutoConfig.from_pretrained(args.model_config)
        self.vocab_size = int(config.vocab_size)
        eos = getattr(config, "eos_token_id", None)
        self.config_eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        self.model = self._build_model(transformers, config)
        self.load_time = time.perf_counter() - t0
        print(f"peer_transformers: {self.name}, torch {torch.__version__}, {torch.cuda.get_device_name()}; "
              f"{type(self.model).__name__} with random weights ({args.model_config}, bf16, "
              f"attn {getattr(self.model.config, '_attn_implementation', '?')}) built in {self.load_time:.1f} s",
              file=sys.stderr)
        self.gen_config = GenConfig(
            max_new_tokens=getattr(args, "output_len", 16),
            do_sample=not args.greedy,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            eos_token_id=None if args.ignore_eos else self.config_eos,
            num_return_sequences=1,
        )
        if args.ignore_eos:
            # -1: no EOS (what init_continuous_batching sets for None); set
            # after construction, past GenerationConfig's validation.
            self.gen_config.eos_token_id = -1
        self.cb_config = self._build_cb_config(CBConfig)
        self.manager = None
        self.startup_time = None
        self._waiters = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._dispatcher = None
        self._ids = itertools.count()

    def _build_model(self, transformers, config):
        """from_config with random weights, created on the GPU (initialising
        8B parameters there takes seconds), bf16."""
        torch = self.torch
        kwargs = {"attn_implementation": self.args.attn_implementation} if self.args.attn_implementation else {}
        errors = []
        for on_gpu in (True, False):
            for dtype_kw in ("dtype", "torch_dtype"):  # "dtype" since 4.56, as scripts/hf_bf16_error.py
                try:
                    if on_gpu:
                        with torch.device("cuda"):
                            model = transformers.AutoModelForCausalLM.from_config(
                                config, **{dtype_kw: torch.bfloat16}, **kwargs)
                    else:
                        model = transformers.AutoModelForCausalLM.from_config(
                            config, **{dtype_kw: torch.bfloat16}, **kwargs)
                    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
                    break
                except Exception as e:  # noqa: BLE001 (every failure is reported below)
                    errors.append(f"from_config({dtype_kw}=bfloat16{', on the GPU' if on_gpu else ''}): "
                                  f"{type(e).__name__}: {e}")
                    print(f"peer_transformers: {errors[-1]}", file=sys.stderr)
            else:
                continue
            break
        else:
            die("cannot build the model: " + "; ".join(errors))
        # Uninitialised memory would make the sampler fail on NaN logits.
        with torch.no_grad():
            bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            die(f"the random weights are not finite in {', '.join(bad[:3])}")
        return model

    def _build_cb_config(self, CBConfig):
        a = self.args
        wanted = {
            "block_size": a.block_size,
            "num_blocks": a.num_blocks,
            "max_batch_tokens": a.max_batch_tokens,
            "max_memory_percent": a.max_memory_percent,
            "max_requests_per_batch": a.max_requests_per_batch,
            "scheduler_type": a.scheduler,
            "use_cuda_graph": {"auto": None, "on": True, "off": False}[a.cuda_graph],
            "use_async_batching": {"auto": None, "on": True, "off": False}[a.async_batching],
            "default_compile_level": a.compile_level,
            "allow_block_sharing": False if a.no_prefix_caching else None,
        }
        if dataclasses.is_dataclass(CBConfig):
            fields = {f.name for f in dataclasses.fields(CBConfig)}
        else:
            fields = named_params(CBConfig)
        kwargs = {}
        for k, v in wanted.items():
            if v is None:
                continue
            if k not in fields:
                die(f"{self.name}: ContinuousBatchingConfig has no '{k}' (set by a flag of this script)")
            kwargs[k] = v
        return CBConfig(**kwargs)

    def workload_hints(self, max_prompt_length, max_generated_length, num_requests):
        try:
            from transformers.generation.continuous_batching.utils import WorkloadHints
        except ImportError:
            return None
        values = {"max_prompt_length": max_prompt_length, "max_generated_length": max_generated_length,
                  "num_requests": num_requests}
        if dataclasses.is_dataclass(WorkloadHints):
            fields = {f.name for f in dataclasses.fields(WorkloadHints)}
        else:
            fields = named_params(WorkloadHints)
        try:
            return WorkloadHints(**{k: v for k, v in values.items() if k in fields})
        except TypeError:
            return None

    # ---- the manager -----------------------------------------------------

    def start(self, hints=None):
        """Creates, warms up (CUDA graph capture where transformers uses
        them) and starts the manager; not counted in any timing."""
        t0 = time.perf_counter()
        self.manager = call_with_known(self.model.init_continuous_batching, generation_config=self.gen_config,
                                       continuous_batching_config=self.cb_config, workload_hints=hints)
        if hasattr(self.manager, "warmup") and not self.args.no_manager_warmup:
            self.manager.warmup()
        self._add_params = named_params(self.manager.add_request)
        self.manager.start()
        self.startup_time = time.perf_counter() - t0
        self._dispatcher = threading.Thread(target=self._dispatch, name="peer-dispatch", daemon=True)
        self._dispatcher.start()
        print(f"peer_transformers: manager started in {self.startup_time:.1f} s; {self.settings_line()}",
              file=sys.stderr)

    def settings(self):
        """The resolved continuous batching settings (after the manager
        created its cache), for the JSON."""
        cfg = getattr(self.manager, "continuous_batching_config", None) or self.cb_config
        if dataclasses.is_dataclass(cfg):
            d = {f.name: jsonable(getattr(cfg, f.name, None)) for f in dataclasses.fields(cfg)}
        else:
            d = {k: jsonable(v) for k, v in vars(cfg).items() if not k.startswith("_")}
        bp = getattr(self.manager, "batch_processor", None)
        cache = getattr(bp, "cache", None)
        for attr in ("num_blocks", "block_size", "max_batch_tokens", "use_prefix_sharing"):
            if cache is not None and hasattr(cache, attr):
                d["cache." + attr] = jsonable(getattr(cache, attr))
        return {
            "name": self.name,
            "model_config": self.args.model_config,
            "model_class": type(self.model).__name__,
            "dtype": "bfloat16",
            "attn_implementation": jsonable(getattr(self.model.config, "_attn_implementation", None)),
            "do_sample": not self.args.greedy,
            "ignore_eos": self.args.ignore_eos,
            "torch": self.torch.__version__,
            "gpu": self.torch.cuda.get_device_name(),
            "model_build_time": self.load_time,
            "manager_startup_time": self.startup_time,
            "continuous_batching_config": d,
        }

    def settings_line(self):
        s = self.settings()["continuous_batching_config"]
        keys = ("block_size", "num_blocks", "max_batch_tokens", "max_requests_per_batch", "use_cuda_graph",
                "use_async_batching", "allow_block_sharing", "scheduler_type")
        return ", ".join(f"{k} {s.get(k)}" for k in keys if k in s)

    def _dispatch(self):
        while not self._stopping.is_set():
            out = self.manager.get_result(timeout=0.1)
            now = time.perf_counter()
            if out is None:
                if not self.manager.is_running() and not self._stopping.is_set():
                    self._fail_all("the transformers generation thread stopped (see its log above)")
                    return
                continue
            with self._lock:
                q = self._waiters.get(out.request_id)
            if q is not None:
                q.put((now, out))

    def _fail_all(self, message):
        with self._lock:
            waiters = list(self._waiters.values())
        for q in waiters:
            q.put((time.perf_counter(), message))

    def submit(self, input_ids, max_new_tokens, streaming=False, record_timestamps=False, ignore_eos=True):
        rid = f"peer_{next(self._ids)}"
        q = queue.Queue()
        with self._lock:
            self._waiters[rid] = q
        kwargs = {"input_ids": list(input_ids), "request_id": rid, "max_new_tokens": int(max_new_tokens),
                  "streaming": streaming, "record_timestamps": record_timestamps,
                  "eos_token_id": -1 if ignore_eos else (self.config_eos or -1)}
        self.manager.add_request(**{k: v for k, v in kwargs.items() if k in self._add_params})
        return rid, q

    def release(self, rid):
        with self._lock:
            self._waiters.pop(rid, None)

    def cancel(self, rid):
        if hasattr(self.manager, "cancel_request"):
            self.manager.cancel_request(rid)

    def run_batch(self, prompts, timeout=None):
        """Submits [(ids, max_new_tokens)] at once and waits for all: per
        request the first-token time (s from the submit; None without
        timestamps), the end, the output tokens and the error ("" if none)."""
        n = len(prompts)
        first = [None] * n
        finished = [0.0] * n
        tokens = [0] * n
        errors = [""] * n
        start = time.perf_counter()
        rids = [self.submit(ids, m, record_timestamps=True) for ids, m in prompts]
        for i, (rid, q) in enumerate(rids):
            while True:
                try:
                    at, out = q.get(timeout=timeout)
                except queue.Empty:
                    errors[i] = f"no result in {timeout} s"
                    break
                if isinstance(out, str):  # the dispatcher's failure message
                    errors[i] = out
                    finished[i] = at - start
                    break
                if not is_final(out):
                    continue
                finished[i] = at - start
                tokens[i] = len(out.generated_tokens)
                errors[i] = failure(out)
                stamps = getattr(out, "timestamps", None)
                if stamps:
                    first[i] = stamps[0] - start
                break
            self.release(rid)
        elapsed = time.perf_counter() - start
        return {"elapsed": elapsed, "first_token": first, "finished": finished, "output_tokens": tokens,
                "errors": errors}

    def stop(self):
        self._stopping.set()
        if self.manager is not None:
            try:
                self.manager.stop(block=True, timeout=30)
            except TypeError:
                self.manager.stop()


# --------------------------------------------------------------------------
# offline


def run_offline(args):
    engine = PeerEngine(args)
    prompts = random_dataset(args.num_prompts, args.input_len, args.output_len, args.range_ratio,
                             args.vocab_size or engine.vocab_size, args.seed)
    # Warm-up prompts from the next seed (as `bench serve`), so that they
    # leave nothing in the prefix cache that the run's prompts could hit.
    warm = random_dataset(max(args.num_warmups, 1), args.input_len, min(args.output_len, 16), args.range_ratio,
                          args.vocab_size or engine.vocab_size, args.seed + 1)[:args.num_warmups]
    max_prompt = max(len(p) for p, _ in prompts)
    max_out = max(m for _, m in prompts)
    hints = engine.workload_hints(max_prompt, max_out, len(prompts))
    if args.api == "generate_batch":
        result = offline_generate_batch(engine, prompts, warm, hints)
    else:
        engine.start(hints)
        if warm:
            print(f"peer_transformers: offline: {len(warm)} warm-up request(s)", file=sys.stderr)
            engine.run_batch(warm)
        print(f"peer_transformers: offline: {len(prompts)} requests "
              f"({sum(len(p) for p, _ in prompts)} prompt tokens)", file=sys.stderr)
        result = engine.run_batch(prompts)
        result["timing"] = "ContinuousBatchingManager started and warmed up before the clock"
        result["startup"] = engine.startup_time
    report = throughput_report(result, prompts, engine.name, engine.settings(), args)
    write_json(args.json_out, report)
    engine.stop()
    return 1 if report["failed"] else 0


def offline_generate_batch(engine, prompts, warm, hints):
    """One timed generate_batch call (its manager start-up, warm-up and
    cache allocation included), after an untimed one on the warm-up prompts."""
    lens = {m for _, m in prompts}
    if len(lens) != 1:
        die("--api generate_batch takes one max_new_tokens for all prompts: use --range-ratio 0")
    gen = engine.gen_config
    gen.max_new_tokens = lens.pop()
    fn = engine.model.generate_batch
    if warm:
        call_with_known(fn, inputs=[p for p, _ in warm], generation_config=gen,
                        continuous_batching_config=engine.cb_config, progress_bar=False,
                        max_new_tokens=gen.max_new_tokens)
    start = time.perf_counter()
    outputs = call_with_known(fn, inputs=[p for p, _ in prompts], generation_config=gen,
                              continuous_batching_config=engine.cb_config, progress_bar=False,
                              max_new_tokens=gen.max_new_tokens)
    elapsed = time.perf_counter() - start
    results = list(outputs.values())
    tokens = [len(o.generated_tokens) for o in results] + [0] * (len(prompts) - len(results))
    errors = [failure(o) for o in results] + ["missing from generate_batch's results"] * (len(prompts) - len(results))
    return {"elapsed": elapsed, "output_tokens": tokens, "errors": errors,
            "timing": "one generate_batch call, its manager start-up included"}


# --------------------------------------------------------------------------
# latency


def run_latency(args):
    engine = PeerEngine(args)
    vocab = args.vocab_size or engine.vocab_size
    if args.max_model_len and args.input_len + args.output_len > args.max_model_len:
        die(f"--input-len + --output-len ({args.input_len + args.output_len}) exceeds --max-model-len "
            f"{args.max_model_len}", 2)
    engine.start(engine.workload_hints(args.input_len, args.output_len, args.batch_size))
    latencies, prefills, decodes = [], [], []
    method = "token timestamps (record_timestamps)"
    for it in range(args.num_iters_warmup + args.num_iters):
        warm = it < args.num_iters_warmup
        batch = [(ids, args.output_len) for ids in latency_batch(args.batch_size, args.input_len, vocab, args.seed, it)]
        r = engine.run_batch(batch)
        bad = [e for e in r["errors"] if e]
        if bad:
            die(f"a request failed: {bad[0]}")
        if any(f is None for f in r["first_token"]):
            # No timestamps in this version: the batch's prefill alone, on
            # other prompts of the same shape (max_new_tokens=1).
            method = "a separate batch with max_new_tokens=1"
            other = latency_batch(args.batch_size, args.input_len, vocab, args.seed, 1000000 + it)
            prefill = engine.run_batch([(ids, 1) for ids in other])["elapsed"]
        else:
            prefill = max(r["first_token"])
        print(f"peer_transformers: latency: {'warm-up' if warm else 'iteration'} "
              f"{it + 1 if warm else it - args.num_iters_warmup + 1}/"
              f"{args.num_iters_warmup if warm else args.num_iters}: {r['elapsed']:.4f} s (prefill {prefill:.4f} s)",
              file=sys.stderr)
        if warm:
            continue
        latencies.append(r["elapsed"])
        prefills.append(prefill)
        decodes.append(r["elapsed"] - prefill)
    report = latency_report(latencies, prefills, decodes, engine.name, engine.settings(), args, method)
    write_json(args.json_out, report)
    engine.stop()
    return 0


# --------------------------------------------------------------------------
# serve: an OpenAI-compatible /v1/completions over the manager


def make_handler(engine, args, served_name):
    from http.server import BaseHTTPRequestHandler

    counter = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "peer_transformers"

        def log_message(self, fmt, *a):  # noqa: N802 (http.server's name)
            if args.verbose:
                super().log_message(fmt, *a)

        def send_json(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_error_json(self, status, message):
            self.send_json(status, {"error": {"message": message, "type": "invalid_request_error",
                                              "code": status}})

        def do_GET(self):  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/health":
                self.send_json(200, {"status": "ok"})
            elif path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [
                    {"id": served_name, "object": "model", "created": int(time.time()), "owned_by": engine.name,
                     "max_model_len": args.max_model_len or None}]})
            else:
                self.send_error_json(404, f"no route {path}")

        def do_POST(self):  # noqa: N802
            path = self.path.split("?")[0]
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
            except (ValueError, json.JSONDecodeError) as e:
                return self.send_error_json(400, f"the body is not JSON: {e}")
            if path == "/v1/completions":
                return self.completions(body)
            if path == "/v1/chat/completions":
                return self.send_error_json(400, "this driver has no tokenizer: use /v1/completions with "
                                                 "token-id prompts")
            return self.send_error_json(404, f"no route {path}")

        def completions(self, body):
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
                prompt = prompt[0]
            if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
                return self.send_error_json(400, "prompt must be a non-empty list of token ids (this driver "
                                                 "has no tokenizer)")
            if any(t < 0 or t >= engine.vocab_size for t in prompt):
                return self.send_error_json(400, f"token id out of [0, {engine.vocab_size})")
            max_tokens = int(body.get("max_tokens") or 16)
            if args.max_model_len and len(prompt) + max_tokens > args.max_model_len:
                return self.send_error_json(
                    400, f"This model's maximum context length is {args.max_model_len} tokens; the request has "
                         f"{len(prompt)} prompt tokens and max_tokens {max_tokens}")
            ignore_eos = bool(body.get("ignore_eos", False))
            stream = bool(body.get("stream", False))
            include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
            cid = f"cmpl-{next(counter)}"
            created = int(time.time())
            rid, q = engine.submit(prompt, max_tokens, streaming=stream, ignore_eos=ignore_eos)
            try:
                if stream:
                    self.send_stream(q, cid, created, len(prompt), max_tokens, include_usage)
                else:
                    self.send_whole(q, cid, created, len(prompt), max_tokens)
            except (BrokenPipeError, ConnectionResetError):
                engine.cancel(rid)
            finally:
                engine.release(rid)

        def next_output(self, q):
            """The newest output waiting (tokens that piled up go in one
            chunk, as a server that coalesces deltas)."""
            at, out = q.get()
            while not isinstance(out, str) and not is_final(out):
                try:
                    at, out = q.get_nowait()
                except queue.Empty:
                    break
            return out

        def write_chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def event(self, obj):
            self.write_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def send_stream(self, q, cid, created, prompt_len, max_tokens, include_usage):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            base = {"id": cid, "object": "text_completion", "created": created, "model": served_name}
            while True:
                out = self.next_output(q)
                if isinstance(out, str):
                    self.event({"error": {"message": out, "code": 500}})
                    break
                if failure(out):
                    self.event({"error": {"message": failure(out), "code": 500}})
                    break
                toks = list(out.generated_tokens)
                new = toks[sent:]
                final = is_final(out)
                if new:
                    reason = ("length" if len(toks) >= max_tokens else "stop") if final else None
                    self.event(dict(base, choices=[{"index": 0, "text": "".join(f" {t}" for t in new),
                                                    "logprobs": None, "finish_reason": reason,
                                                    "token_ids": new}]))
                sent = len(toks)
                if final:
                    break
            if include_usage:
                self.event(dict(base, choices=[], usage={"prompt_tokens": prompt_len, "completion_tokens": sent,
                                                         "total_tokens": prompt_len + sent}))
            self.write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def send_whole(self, q, cid, created, prompt_len, max_tokens):
            while True:
                out = self.next_output(q)
                if isinstance(out, str) or failure(out):
                    return self.send_json(500, {"error": {"message": out if isinstance(out, str) else failure(out),
                                                          "code": 500}})
                if is_final(out):
                    break
            toks = list(out.generated_tokens)
            self.send_json(200, {
                "id": cid, "object": "text_completion", "created": created, "model": served_name,
                "choices": [{"index": 0, "text": "".join(f" {t}" for t in toks), "logprobs": None,
                             "finish_reason": "length" if len(toks) >= max_tokens else "stop", "token_ids": toks}],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": len(toks),
                          "total_tokens": prompt_len + len(toks)}})

    return Handler


def run_serve(args):
    from http.server import ThreadingHTTPServer

    engine = PeerEngine(args)
    served_name = args.served_model_name or os.path.basename(os.path.normpath(args.model_config))
    engine.start(engine.workload_hints(args.max_model_len or 0, 0, 0))
    if args.num_warmups > 0:  # before listening: /health answers once the engine is warm
        warm = random_dataset(args.num_warmups, 128, 16, 0.0, engine.vocab_size, args.seed + 999)
        engine.run_batch(warm)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 4096  # every request of a rate-inf run connects at once

    server = Server((args.host, args.port), make_handler(engine, args, served_name))

    def on_term(signum, frame):
        raise KeyboardInterrupt

    # Explicit handlers: a server started with `&` by a script has SIGINT
    # ignored, and Python then installs no KeyboardInterrupt for it.
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGTERM, on_term)
    print(f"peer_transformers: serving {served_name} ({engine.name}) on http://{args.host}:{args.port} "
          f"(/health, /v1/models, /v1/completions with token-id prompts, streamed)", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("peer_transformers: stopping", file=sys.stderr)
    finally:
        server.server_close()
        engine.stop()
    return 0


def run_check(args):
    torch, transformers, _, _ = import_stack()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    if gpu is None:
        die(f"transformers {transformers.__version__}, torch {torch.__version__}: no CUDA device")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {gpu}")
    return 0


# --------------------------------------------------------------------------


def add_engine_flags(p):
    p.add_argument("--model-config", required=True, help="a folder with config.json (weights are random)")
    p.add_argument("--seed", type=int, default=0, help="dataset and torch seed (troupe's config seed)")
    p.add_argument("--vocab-size", type=int, default=0, help="ids drawn from [0, V) (default: the config's)")
    p.add_argument("--attn-implementation", default="sdpa",
                   help="loaded as this; the manager switches to 'paged|<it>' (sdpa, eager, flash_attention_2 "
                        "with the flash-attn package)")
    p.add_argument("--greedy", action="store_true", help="argmax instead of sampling at temperature 1")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="stop at the config's EOS ids (default: ignored, as troupe's bench)")
    p.add_argument("--max-model-len", type=int, default=0, help="reject longer requests (0: no limit)")
    g = p.add_argument_group("ContinuousBatchingConfig (unset: transformers' default)")
    g.add_argument("--block-size", type=int)
    g.add_argument("--num-blocks", type=int)
    g.add_argument("--max-batch-tokens", type=int)
    g.add_argument("--max-memory-percent", type=float)
    g.add_argument("--max-requests-per-batch", type=int)
    g.add_argument("--scheduler", help="scheduler_type: fifo or prefill_first")
    g.add_argument("--cuda-graph", choices=["auto", "on", "off"], default="auto")
    g.add_argument("--async-batching", choices=["auto", "on", "off"], default="auto")
    g.add_argument("--compile-level", type=int, help="default_compile_level 0-3")
    g.add_argument("--no-prefix-caching", action="store_true", help="allow_block_sharing=False")
    g.add_argument("--no-manager-warmup", action="store_true", help="skip ContinuousBatchingManager.warmup()")
    p.add_argument("--json-out", default="")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    o = sub.add_parser("offline", help="offline throughput (troupe bench throughput --dataset random)")
    add_engine_flags(o)
    o.add_argument("--num-prompts", type=int, default=1000)
    o.add_argument("--input-len", type=int, default=1024)
    o.add_argument("--output-len", type=int, default=128)
    o.add_argument("--range-ratio", type=float, default=0.0)
    o.add_argument("--num-warmups", type=int, default=16,
                   help="requests in the untimed warm-up batch (other prompts, at most 16 tokens out)")
    o.add_argument("--api", choices=["manager", "generate_batch"], default="manager")
    lat = sub.add_parser("latency", help="batch latency (troupe bench latency)")
    add_engine_flags(lat)
    lat.add_argument("--batch-size", type=int, default=8)
    lat.add_argument("--input-len", type=int, default=32)
    lat.add_argument("--output-len", type=int, default=128)
    lat.add_argument("--num-iters", type=int, default=30)
    lat.add_argument("--num-iters-warmup", type=int, default=10)
    s = sub.add_parser("serve", help="OpenAI-compatible /v1/completions for troupe bench serve")
    add_engine_flags(s)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", default="")
    s.add_argument("--num-warmups", type=int, default=16, help="requests run before the server listens")
    s.add_argument("--verbose", action="store_true", help="log every HTTP request")
    sub.add_parser("check", help="print the versions; exit 1 when the API is missing or there is no GPU")
    args = ap.parse_args(argv)
    for name in ("batch_size", "num_iters", "input_len", "output_len", "num_prompts"):
        if name in vars(args) and getattr(args, name) < (0 if name == "input_len" else 1):
            ap.error(f"--{name.replace('_', '-')}: too small")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return {"offline": run_offline, "latency": run_latency, "serve": run_serve, "check": run_check}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
