"""The engine against the plain model it stands for: one SimPy process per pipe, waiting
in global time on every flag. The engine times on-chip work without SimPy (pipes run ahead
of the global clock); this checks, over random programs, that every record is the same."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine.world import (
    KernelSpan,
    PipeLog,
    World,
    _GlobalTransfer,
)
from simulator.pipeline import lower_workload

from .test_properties import EPILOGUES, cases, legal_workload


class ProcessPerPipeWorld(World):
    """Each pipe of each core is a SimPy process; a flag is a count plus waiting events."""

    def _kernels(self):
        for index, kernel in enumerate(self.program.kernels):
            start = self.env.now
            yield self.env.timeout(self.hw.launch_overhead_cycles)
            pipes = []
            for core_index, core in enumerate(kernel.cores):
                flags = [[count, []] for count in core.flag_initial]
                for pipe, queue in core.queues.items():
                    if queue:
                        log = PipeLog(index, core_index, pipe, queue, [])
                        self.pipe_logs.append(log)
                        pipes.append(self.env.process(self._pipe(log, core, flags)))
            yield self.env.all_of(pipes)
            self.spans.append(KernelSpan(index, start, int(self.env.now)))

    def _pipe(self, log, core, flags):
        env = self.env
        for instr in log.instrs:
            wait_data = wait_slot = 0
            for flag_id in instr.waits:
                flag = flags[flag_id]
                if flag[0]:
                    flag[0] -= 1
                    continue
                event, since = env.event(), env.now
                flag[1].append(event)
                yield event
                if core.flag_cause[flag_id] == "buffer_slot":
                    wait_slot += env.now - since
                else:
                    wait_data += env.now - since
            start = int(env.now)
            hit = hbm = bandwidth_wait = 0
            if instr.region is not None:
                landed = env.event()
                _GlobalTransfer(self, instr, start, landed.succeed)
                transfer = yield landed
                hit, hbm = transfer.hit_bytes, transfer.hbm_bytes
                bandwidth_wait = int(env.now) - start - transfer.ideal
            elif instr.src is None:
                yield env.timeout(instr.cycles)
            else:
                latency, rate = self.routes[(instr.src, instr.dst)]
                yield env.timeout(latency + math.ceil(instr.nbytes / rate))
            for flag_id in instr.sets:
                count_and_waiters = flags[flag_id]
                if count_and_waiters[1]:
                    count_and_waiters[1].pop(0).succeed()
                else:
                    count_and_waiters[0] += 1
            log.logged.extend((start, int(env.now), wait_data, wait_slot, bandwidth_wait, hit,
                               hbm))


def records_of(world_class, workload):
    program = lower_workload(workload)
    trace = world_class(program, workload.hardware).run()
    return trace.cycles, sorted(trace.records), trace.kernels


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), epilogue=EPILOGUES, cores=st.sampled_from([1, 2]))
def test_running_ahead_gives_the_times_of_a_process_per_pipe(tiny, case, epilogue, cores):
    m, n, k, tiling = case
    tiling = dict(tiling, split={"m": 1, "n": cores})
    workload = legal_workload(tiny, (m, n, k, tiling), epilogue)
    assert records_of(World, workload) == records_of(ProcessPerPipeWorld, workload)


def test_the_reference_agrees_on_a_decode_ffn(ascend):
    from simulator import load_workload

    workload = load_workload("workloads/ffn_decode.yaml", ["params.hidden=512",
                                                           "params.ffn=1024"])
    assert records_of(World, workload) == records_of(ProcessPerPipeWorld, workload)
