"""The plain model the engine stands for: one SimPy process per pipe of each core, waiting
in global time on every flag. `World` computes exactly these times with a pipe running ahead
of the global clock and a fraction of the events (tests/test_engine_reference.py checks it on
random programs, and on sampled ones, whose kernel boundaries both worlds share: the L2
warmed for skipped units, the kernel run on for them); this one is kept as the reference,
and as the simplest reading of the model. The benchmark uses it to show what the event rate
of a process per pipe would be."""

from __future__ import annotations

from array import array
from collections import deque
from functools import partial

from ..cost import transfer_cycles
from ..schedule.program import GlobalTransfer, Transfer
from .trace import PipeLog
from .transfer import EngineQueue, landing_delay
from .world import World


class ProcessPerPipeWorld(World):
    """Each pipe of each core is a SimPy process; a flag is a count plus waiting events."""

    def _kernels(self):
        for index, kernel in enumerate(self.program.kernels):
            start = yield from self._launch(index, kernel)
            run, pipes, first_log = int(self.env.now), [], len(self.pipe_logs)
            for core_index, core in enumerate(kernel.cores):
                flags = [[count, []] for count in core.flag_initial]
                for pipe, queue in core.queues.items():
                    if queue:
                        log = PipeLog(index, core_index, pipe, queue, array("q"))
                        self.pipe_logs.append(log)
                        pipes.append(
                            self.env.process(
                                self._pipe(
                                    log,
                                    core,
                                    flags,
                                    self.queue_depths.get(pipe, 1),
                                    EngineQueue(pipe in self.per_tensor_streams),
                                )
                            )
                        )
            yield self.env.all_of(pipes)
            ends = [run] * len(kernel.cores)  # each core's last pipe's end
            for log in self.pipe_logs[first_log:]:
                ends[log.core] = max(ends[log.core], max(log.column("end_cycle"), default=run))
            yield from self._finish(index, kernel, start, first_log, ends)

    def _pipe(self, log, core, flags, depth, transfers):
        env = self.env
        in_flight = deque()  # a landing event per global transfer under way, oldest first
        last_landing = [int(env.now)]

        def set_flags(instr):
            for flag_id in instr.sets:
                count_and_waiters = flags[flag_id]
                if count_and_waiters[1]:
                    count_and_waiters[1].pop(0).succeed()
                else:
                    count_and_waiters[0] += 1

        def landed(wait_data, wait_slot, transfer):
            bandwidth_wait = landing_delay(transfer, last_landing[0])
            last_landing[0] = int(env.now)
            set_flags(transfer.instr)
            log.logged.extend(
                (
                    transfer.start,
                    int(env.now),
                    wait_data,
                    wait_slot,
                    bandwidth_wait,
                    transfer.hit_bytes,
                    transfer.hbm_bytes,
                )
            )
            in_flight.popleft().succeed()

        for position, instr in enumerate(log.instrs):
            if in_flight and type(instr) is not GlobalTransfer:  # on-chip work after them
                yield env.all_of(list(in_flight))
            elif len(in_flight) >= depth:  # a full queue
                yield in_flight[0]
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
            if type(instr) is GlobalTransfer:
                in_flight.append(env.event())
                transfers.issue(
                    self,
                    instr,
                    start,
                    partial(landed, wait_data, wait_slot),
                    order=(log.kernel, log.core, log.pipe, position),
                )
                continue
            if isinstance(instr, Transfer):
                yield env.timeout(
                    transfer_cycles(instr.nbytes, *self.routes[(instr.src, instr.dst)])
                )
            else:
                yield env.timeout(instr.cycles)
            set_flags(instr)
            log.logged.extend((start, int(env.now), wait_data, wait_slot, 0, 0, 0))
        if in_flight:
            yield env.all_of(list(in_flight))
