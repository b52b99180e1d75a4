"""A deployment: a model on a chip group with a batching policy, a token budget and a paged KV
cache, sized for the requests it will serve, and the step times it composes from whole-model
steps (kept for every trace it serves: a capacity search serves one trace at many rates)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from multiprocessing.pool import Pool

from ...config.hardware import Hardware
from ...config.model import ModelConfig, kv_cache_bytes, shard
from ...config.runtime import DECODE, Runtime
from ...config.transformer import Step
from ...errors import SimulatorError, check_count
from ...ops import DTYPE_BYTES
from ...units import format_bytes_decimal as fmt_bytes
from ...version import __version__
from ...workers import dask_client, worker_pool
from ..inference import (
    StepOptions,
    StepTimer,
    capped_notes,
    check_context,
    check_deployment,
    hbm_footprint,
    loaded,
    sampling_note,
)
from ..inference_report import StepTime
from .engine import POLICIES, PagedKVCache, longest, prefill_tokens, run_engine
from .report import ServingReport, Slo
from .requests import Request
from .step_times import StepTimes

BLOCK_TOKENS = 16  # vLLM's default block size
MAX_BATCH = 256  # vLLM's default max_num_seqs
MIN_STEP_TOKENS = 2048  # a prefill step's token budget, unless the longest prompt is longer
CHUNKED_STEP_TOKENS = 512  # a chunked-prefill step's (vLLM's default)
TOO_LARGE = "use a smaller --max-step-tokens or shorter prompts"


class Deployment:
    """`model` on `chips` chips in tensor parallel serving with `policy` (engine.py), sized
    for `requests` (their lengths; `serve` may then serve them, or the same lengths at other
    arrival times). A step holds at most `max_batch` sequences and, when it prefills,
    `max_step_tokens` tokens (default: 2,048 or the longest prompt, which a step must
    prefill whole; chunked: 512). The KV cache has `block_tokens` positions a block and,
    per chip, `kv_cache_bytes_per_chip` bytes (default: what HBM has left after the weights
    and the largest prefill's activations). `runtime` (a profile, or its name) drives every
    step as in `infer`: its launch figures, its host time per step, and where a request's
    first token comes from (a prefill stopping a token short leaves it to a decode step).
    The whole-model steps a serving step needs are simulated side by side on up to `workers`
    processes, or on the Dask cluster whose scheduler is at `scheduler`; `on_step` hears of
    each as it is simulated. Several threads may serve at once (a capacity search's points):
    a step is simulated once, for whichever asks first. Use it as a context manager: its
    worker processes (or its Dask client) end with the block."""

    def __init__(
        self,
        model: ModelConfig | str,
        hardware: Hardware | str,
        requests: tuple[Request, ...],
        chips: int = 1,
        policy: str = "continuous",
        max_batch: int = MAX_BATCH,
        max_step_tokens: int | None = None,
        block_tokens: int = BLOCK_TOKENS,
        kv_cache_bytes_per_chip: int | None = None,
        fusion: str = "auto",
        weights: str = "fp16",
        kv_cache: str = "fp16",
        sample: bool = False,
        runtime: Runtime | str | None = None,
        workers: int = 1,
        scheduler: str | None = None,
        on_step: Callable[[str], None] | None = None,
    ):
        model, hardware, runtime = loaded(model, hardware, runtime, "Deployment()")
        for name, value in (
            ("chips", chips),
            ("max_batch", max_batch),
            ("block_tokens", block_tokens),
            ("workers", workers),
        ):
            check_count(name, value)
        check_count("max_step_tokens", max_step_tokens, optional=True)
        if policy not in POLICIES:
            raise SimulatorError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        if not requests:
            raise SimulatorError("no requests to serve")
        check_deployment(hardware, chips, fusion, weights, kv_cache)
        prompts = [r.prompt_tokens for r in requests]
        chunked = policy == "chunked"
        if max_step_tokens is None:
            max_step_tokens = CHUNKED_STEP_TOKENS if chunked else max(MIN_STEP_TOKENS, *prompts)
        elif max_step_tokens < max(prompts) and not chunked:
            raise SimulatorError(
                f"--max-step-tokens {max_step_tokens:,} is below the longest prompt "
                f"({max(prompts):,} tokens, request {prompts.index(max(prompts))}), which a step "
                "must prefill whole"
            )
        for r in requests:
            check_context(model, r.prompt_tokens, r.output_tokens, f"request {r.id}: ")

        part = shard(model, chips)
        options = StepOptions(fusion, weights, kv_cache)
        biggest = max(requests, key=longest)
        largest = max(max_step_tokens, longest(biggest))
        need = hbm_footprint(part, hardware, Step("prefill", 1, largest, largest), 0, options)
        left = need.hbm_capacity_bytes - need.weight_bytes - need.activation_bytes
        if kv_cache_bytes_per_chip is None:
            kv_cache_bytes_per_chip = left
        elif kv_cache_bytes_per_chip > left:
            raise SimulatorError(
                f"--kv-cache-memory {fmt_bytes(kv_cache_bytes_per_chip)} is more than the "
                f"{fmt_bytes(max(left, 0))} of HBM per chip left after the weights and activations"
            )
        block_bytes = kv_cache_bytes(part, block_tokens, DTYPE_BYTES[kv_cache])
        blocks = max(0, kv_cache_bytes_per_chip) // block_bytes
        where = f"{chips} x {hardware.name}" if chips > 1 else hardware.name
        if blocks * block_tokens < longest(biggest):
            raise SimulatorError(
                f"request {biggest.id} needs a KV cache of {longest(biggest):,} positions, but "
                f"{where} holds {blocks * block_tokens:,} ({fmt_bytes(kv_cache_bytes_per_chip)} a "
                f"chip after weights {fmt_bytes(need.weight_bytes)} and activations "
                f"{fmt_bytes(need.activation_bytes)}); try more chips, int8 weights or an fp8 "
                "KV cache"
            )

        self.model, self.hardware, self.policy = model, hardware, policy
        self.chips, self.max_batch, self.max_step_tokens = chips, max_batch, max_step_tokens
        self.blocks, self.block_tokens = blocks, block_tokens
        self.options = {
            "chips": chips,
            "policy": policy,
            "max_batch": max_batch,
            "max_step_tokens": max_step_tokens,
            "block_tokens": block_tokens,
            "kv_cache_bytes_per_chip": kv_cache_bytes_per_chip,
            "fusion": fusion,
            "weights": weights,
            "kv_cache": kv_cache,
            "sample": sample,
            "runtime": None if runtime is None else runtime.name,
        }
        self._pools = ExitStack()
        pool: list[Pool] = []  # started when two steps are first asked for together
        starting = threading.Lock()
        client = self._pools.enter_context(dask_client(scheduler)) if scheduler else None
        self._sampled_errors: list[float] = []  # of the runs sampling simulated in part
        self._capped: dict[str, float] = {}  # phase -> the clock a power cap held it to

        def time_steps(steps: list[Step]) -> list[StepTime]:
            jobs = [(part, hardware, options, runtime, sample, step) for step in steps]
            if client is not None:
                timed: Iterable[_Timed] = client.gather(client.map(_time_step, jobs, pure=False))
            elif workers == 1 or len(steps) == 1:
                timed = map(_time_step, jobs)
            else:
                with starting:
                    if not pool:
                        pool.append(self._pools.enter_context(worker_pool(workers)))
                timed = pool[0].imap(_time_step, jobs)
            found = []
            for step, (time, errors, capped) in zip(steps, timed):
                if on_step:
                    on_step(f"{step.phase} {step.batch} x {step.new_tokens} @ {step.context}")
                self._sampled_errors += errors
                self._capped.update(capped)
                found.append(time)
            return found

        self.leave_last = runtime is not None and runtime.first_token == DECODE
        prefills = [prefill_tokens(p, self.leave_last) for p in prompts]
        self.times = StepTimes(
            time_steps,
            hardware.clock_hz,
            chips,
            1 if chunked else min(prefills),
            largest,
            max_batch,
            (min(prompts) + (not self.leave_last), longest(biggest)),  # decodes' contexts
        )
        self._lengths = {(r.prompt_tokens, r.output_tokens) for r in requests}
        try:
            self.times.simulate_prompts(prefills)
        except BaseException:  # no `with` block will end its workers
            self._pools.close()
            raise

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc) -> None:
        self._pools.close()

    def stamped(self, report: ServingReport) -> ServingReport:
        """`report` with the whole-model steps simulated so far and their checks (a report
        made while other threads served names the steps simulated at that moment)."""
        return dataclasses.replace(
            report,
            simulated_steps=len(self.times.simulated),
            simulated=_simulated(self.times),
            checks=tuple(self.times.checks()),
            notes=self.notes(),
        )

    def notes(self) -> tuple[str, ...]:
        """What the whole-model steps simulated so far say of how they were simulated: the
        error estimate of sampling, a clock held down by a power cap."""
        notes = capped_notes(self._capped, self.hardware)
        if self.leave_last:
            notes.append(
                f"runtime {self.options['runtime']} leaves the prompt's last token to its first "
                "decode step: a request's first token follows a prefill of all but its last "
                "prompt token and a decode step over the whole prompt"
            )
        if self._sampled_errors:
            notes.insert(0, sampling_note(self._sampled_errors, "without --sample, every one"))
        return tuple(notes)

    def serve(
        self,
        requests: tuple[Request, ...],
        slo: Slo | None = None,
        workload: str = "",
        concurrency: int | None = None,
    ) -> ServingReport:
        """Serve `requests` (of the lengths the deployment was sized for) and report it,
        each request's TTFT and TPOT judged against `slo`: at their arrival times, or
        (`concurrency`) from that many clients that each send the next request when the
        last one they sent has finished."""
        check_count("concurrency", concurrency, optional=True)
        lengths = {(r.prompt_tokens, r.output_tokens) for r in requests}
        if not requests or not lengths <= self._lengths:
            raise ValueError("serve the lengths the deployment was sized for")
        slo = slo or Slo()
        _check_slo(slo, self.times, min(r.prompt_tokens for r in requests))
        served, steps = run_engine(
            requests,
            self.times,
            PagedKVCache(self.blocks, self.block_tokens),
            self.policy,
            self.max_batch,
            self.max_step_tokens,
            concurrency,
            self.leave_last,
        )
        energy = self.hardware.energy
        return ServingReport(
            self.model.name,
            self.hardware.name,
            self.chips,
            self.policy,
            workload,
            tuple(served),
            tuple(steps),
            self.blocks,
            self.block_tokens,
            0.0 if energy is None else energy.static_watts * self.chips,
            len(self.times.simulated),
            _simulated(self.times),
            tuple(self.times.checks()),
            slo,
            self.notes(),
            {
                "simulator_version": __version__,
                "model_file": self.model.source,
                "hardware_file": self.hardware.source,
                "options": self.options,
            },
        )


_Timed = tuple[StepTime, list[float], dict[str, float]]


def _time_step(
    job: tuple[ModelConfig, Hardware, StepOptions, Runtime | None, bool, Step],
) -> _Timed:
    """A whole-model step (in this process or a worker), with the error estimates of its
    sampled runs and the clock a power cap held any of them to (StepTimer's notes)."""
    part, hardware, options, runtime, sample, step = job
    timer = StepTimer(part, hardware, options, runtime, False, sample, "serve", TOO_LARGE)
    time = timer(step)
    return time, [e for e in timer.sampled_error if e is not None], timer.capped


def _check_slo(slo: Slo, times: StepTimes, shortest_prompt: int) -> None:
    """Refuse a target no request could meet even alone on the chip."""
    if slo.ttft_s is not None:
        alone = times.prefill([shortest_prompt]).seconds
        if slo.ttft_s < alone:
            raise SimulatorError(
                f"--slo ttft={1e3 * slo.ttft_s:g}ms cannot be met: the shortest prompt "
                f"({shortest_prompt:,} tokens) alone takes {1e3 * alone:.3g} ms to prefill"
            )
    if slo.tpot_s is not None:
        step = times.decode([shortest_prompt + 1]).seconds
        if slo.tpot_s < step:
            raise SimulatorError(
                f"--slo tpot={1e3 * slo.tpot_s:g}ms cannot be met: a decode step of one "
                f"sequence alone takes {1e3 * step:.3g} ms"
            )


def _simulated(times: StepTimes) -> tuple[str, ...]:
    prefills = sorted(s.new_tokens for s in times.simulated if s.phase == "prefill")
    decodes = sorted((s.batch, s.context) for s in times.simulated if s.phase == "decode")
    found = []
    if prefills:
        found.append("prefill of " + ", ".join(f"{t:,}" for t in prefills) + " tokens")
    for batch in sorted({b for b, _ in decodes}):
        contexts = [c for b, c in decodes if b == batch]
        found.append(f"decode of {batch} at " + ", ".join(f"{c:,}" for c in contexts))
    return tuple(found)
