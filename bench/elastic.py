#!/usr/bin/python3
"""What a change of the machines costs a mitra job, against torchrun, in one run.

1. recovery (mitra and torchrun, --repeats times each, interleaved): a 2-process job on
   localhost (mitra: `gpt_train --model tiny`, 1 stage x 2 replicas by default, batch 16, a
   checkpoint after every step, --spares 1: a standby worker takes the killed rank's place and
   the survivor parks and is kept; torchrun: bench/python/ddp_recovery.py, the same-sized model
   in DDP on Gloo, torch.save after every step, 1 intra-op thread, `--max_restarts 3
   --monitor_interval 1`, c10d rendezvous). After --warm-steps steps (and, with spares, once
   the spare has parked: spares start at the first step) one worker (rank 1) is SIGKILLed;
   measured: kill -> the first training step finished after the restart
   (mitra: metrics.jsonl `time` of the new generation's first step; torchrun: the time
   the script logged after that step). Split for mitra: failure seen (`failure` event),
   relaunched (`launch`), every rank ready (`ready`), and the manager's own `first_step`
   record; for torchrun: new workers started (their first line), ready (process group up,
   checkpoint loaded).
2. morph (mitra): `localhost slots=4`, 2 stages, `gpt_train --model bench`; the list is
   replaced (a new file renamed over it) by `slots=2`, later by `slots=4` again. Two jobs, one
   after the other: regrouping in place (the default: the workers park and the next generation
   keeps them) and `--no-regroup` (every worker exits and the next generation starts afresh).
   Measured: detect (rename -> `machines_changed`), downtime (the `morph` event -> the new
   generation's first step in metrics.jsonl), the manager's `first_step` record and its split
   (stop: the stop signal -> every rank exited or parked, checkpoint included; relaunch; ready:
   a process start or a regroup; load; first step), the synchronous checkpoint's write time,
   and the workers kept and started.
3. host (mitra, needs SSH in the build): two sshd instances on 127.0.0.2 and 127.0.0.3 (keys
   made with ssh-keygen in a temporary directory), one worker on each; one sshd and every
   process under it gets SIGKILL (`kill`: its connections close at once) or, in a second job,
   SIGSTOP (`freeze`: nothing closes, nothing answers, like a host without power or network).
   Measured: signal -> `failure` event (detection) and signal -> first step of the new
   generation (recovery). Skipped, and said so, when the build answers that it cannot reach
   hosts over SSH, or when sshd is missing.

4. peers (mitra): what a change costs when the state comes from memory (docs/manager.md, "State
   from peers"), for each of --peers-models (default bench and large; batch 8 in micro-batches
   of 4): (a) 2 x 2 -> 2 x 1 -> 2 x 2 on `localhost slots=4` -> 2 -> 4: the gap between the old
   shape's last step (done on every rank: the latest of rank 0's record and the ranks'
   `rank_stopped`) and the new shape's first, less that first step's computing, i.e. its own
   time less what it waited for the optimizer state still arriving (`overhead_s`: the stop, the
   regroup, the transfer and its waits; the step in flight is in neither), and less a step of
   the new shape instead, the median of the three after the first (`overhead_vs_steady_s`:
   all the change costs, the first step's own slowdowns too); where each rank's state came
   from, and the background checkpoint that follows (of the first step after the change); (b)
   2 x 2 with --spares 1 and --checkpoint-every 100, a replica of stage --heal-stage SIGKILLed
   (default 0, the stage the spare builds while it waits; 1: the spare builds the failed rank's
   stage after the failure): steps trained again and kill -> first step, less that step's
   computing (and less a steady step);
   (c) 2 x 1 -> 4 x 1, chosen by the planner under a made-up profile in which pipelines win
   (batch 16: four micro-batches): the bytes sent between ranks against the bytes of the
   segments that changed owner (from the model's description: parameters, AdamW's two moments
   and step count, buffers), and their rate (to the last byte received) against one TCP
   stream over loopback measured in the same run. --peers-parts picks among morphs, heal and
   change_p (default all three).

5. chaos (mitra): the tiny GPT, 2 stages, batch 16 in micro-batches of 4, --chaos-steps steps
   with --checkpoint-every 50, --spares 1 and --heartbeat-timeout 2 on `localhost slots=4`; after
   every 60 steps one random change (seeded: --chaos-seed): the list edited to the other of
   slots=4 / slots=2, a worker SIGKILLed, or a worker SIGSTOPped. Counted against the same job
   run uninterrupted as 1 x 1: every step trained (its last record) and its loss, every step's
   samples (MITRA_TRACE_SAMPLES), and for each change whether the kept workers held every
   stage's state (the launch's held_step is its resume_step: "from memory") or the job went
   back to a checkpoint, with the steps it trained again (the newest step trained before the
   change less the step it resumed from).

Prints one JSON object per measurement and a final JSON summary with medians and the targets:
planned morph downtime (the last step of the old shape -> the first of the new) <= 1.0 s for
shrink and grow when regrouping in place (beside it the ratio of the restart path's to it, and
the same from the stop signal, which adds the step in flight); a killed worker's kill -> first step <= 0.3 s; a
frozen SSH host's kill -> first step <= 4 s; dead host detected <= 3 s; mitra's kill -> first
step faster than torchrun's (ratio torchrun/mitra > 1). torchrun's floor for a lost node (defaults of torch.distributed.elastic's c10d rendezvous:
3 missed 5 s keep-alives, then a 30 s last call) is printed beside them for reference.

Every process it starts is killed (by process group, and by run directory) before it exits;
every wait has a timeout.

  bench/elastic.py [--build build] [--repeats 3] [--quick]
                   [--parts recovery,morph,host,peers,chaos] [--chaos-steps 900]
                   [--peers-models bench,large] [--keep]
"""
import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch (see shared facts)


def emit(obj):
    print(json.dumps(obj), flush=True)


def note(msg):
    print(f"elastic: {msg}", file=sys.stderr, flush=True)


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return out


def wait_for(what, fn, timeout, proc=None, poll=0.02):
    """Polls fn() until it returns something truthy; raises after timeout seconds."""
    deadline = time.time() + timeout
    while True:
        value = fn()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the job exited ({proc.returncode}) first")
        if time.time() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(poll)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------
# Processes: everything started here runs in its own session; cleanup kills the session,
# every descendant, and (for mitra) every process whose environment names the run directory
# (workers started over SSH are not descendants of the manager).

def ppid_map():
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid):
    children = ppid_map()
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def pids_with_env(entry):
    needle = entry.encode() + b"\0"
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read() + b"\0":
                    out.append(int(name))
        except OSError:
            pass
    return out


def environ_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Job:
    """A process started in its own session, stdout+stderr to a file."""

    def __init__(self, cmd, log, cwd=None, env=None, run_dir=None):
        self.log_path = log
        self.run_dir = run_dir
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                     start_new_session=True)
        self.pid = self.proc.pid

    def poll(self):
        return self.proc.poll()

    @property
    def returncode(self):
        return self.proc.returncode

    def tail(self, n=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self, grace=20):
        """SIGTERM (a graceful stop for both managers), then SIGKILL to whatever is left."""
        tree = descendants(self.pid)
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill(tree)

    def kill(self, extra=()):
        pids = set(extra) | set(descendants(self.pid))
        if self.run_dir:
            pids |= set(pids_with_env(f"MITRA_RUN_DIR={self.run_dir}"))
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill_all(pids)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.time() + 10
        while any(alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.05)
        self.log.close()


# ---------------------------------------------------------------------------------------
# mitra

class Mitra:
    def __init__(self, args, tmp, machines, stages, model, extra=(), batch=None):
        self.run_dir = os.path.join(tmp, "run")
        self.machines = os.path.join(tmp, "machines.txt")
        with open(self.machines, "w") as f:
            f.write(machines)
        cmd = [f"{args.build}/bin/mitra", "run", "--machines", self.machines,
               "--batch-size", str(batch or args.batch_size),
               *(["--nstages", str(stages)] if stages else []),
               "--max-steps", "1000000", "--run-dir", self.run_dir, *extra, "--",
               f"{args.build}/bin/gpt_train", "--model", model]
        self.job = Job(cmd, os.path.join(tmp, "mitra.out"), cwd=tmp, run_dir=self.run_dir)

    def wait_spare_parked(self, timeout):
        """Until the job's first spare has parked (its log holds its `parked` record). Spares
        start at a generation's first step and take 0.6-0.8 s to start here: a kill before that
        measures a recovery that waits for the spare's start, not one with a spare waiting."""
        log = os.path.join(self.run_dir, "logs", "standby-0.log")

        def parked():
            try:
                with open(log, errors="replace") as f:
                    return '"event":"parked"' in f.read()
            except OSError:
                return False
        wait_for("the spare to park", parked, timeout, self.job)

    def events(self, name=None, generation=None):
        out = read_jsonl(os.path.join(self.run_dir, "events.jsonl"))
        return [e for e in out if (name is None or e.get("event") == name)
                and (generation is None or e.get("generation") == generation)]

    def steps(self, generation):
        return [m for m in read_jsonl(os.path.join(self.run_dir, "metrics.jsonl"))
                if m.get("generation") == generation]

    def wait_steps(self, generation, n, timeout):
        return wait_for(f"mitra: {n} steps in generation {generation}",
                        lambda: len(self.steps(generation)) >= n and self.steps(generation),
                        timeout, self.job)

    def wait_event(self, name, generation, timeout):
        return wait_for(f"mitra: event {name} in generation {generation}",
                        lambda: self.events(name, generation), timeout, self.job)[0]

    def replace_machines(self, text):
        tmp = self.machines + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        t = time.time()
        os.replace(tmp, self.machines)
        return t


KEEP = False  # --keep: leave the temporary directories (run directories, logs) in place


def cleanup(tmp):
    if KEEP:
        note(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def mitra_job(args, prefix, machines, stages, model, extra=(), batch=None, prepare=None):
    """A Mitra job in a temporary directory (`prepare(tmp)` runs first): its output shown when
    the body fails; stopped, and the directory removed, either way."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    m = None
    try:
        if prepare:
            prepare(tmp)
        m = Mitra(args, tmp, machines, stages, model, extra, batch)
        yield m
    except Exception:
        if m:
            note("mitra output:\n" + m.job.tail())
        raise
    finally:
        if m:
            m.job.stop()
        cleanup(tmp)


def rel(t, t0):
    return round(t - t0, 3)


def mitra_recovery(args, rep):
    with mitra_job(args, "mitra-elastic-", "localhost slots=2\n", args.stages, "tiny",
                   ["--checkpoint-every", "1", "--spares", str(args.spares)]) as m:
        m.wait_steps(0, args.warm_steps, args.start_timeout)
        if args.spares > 0:
            m.wait_spare_parked(args.start_timeout)
        victim = m.events("launch", 0)[0]["pids"][1]
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        first = m.wait_steps(1, 1, args.recover_timeout)[0]
        fs = m.wait_event("first_step", 1, 10)
        failure = m.events("failure", 0)[0]
        launch = m.events("launch", 1)[0]
        ready = m.wait_event("ready", 1, 10)
        restored = m.events("restored", 1)
        return {"bench": "recovery", "system": "mitra", "repeat": rep,
                "shape": f"{args.stages} x {2 // args.stages}", "killed_step": failure.get("step"),
                "kill_to_first_step_s": rel(first["time"], t_kill),
                "detect_s": rel(failure["time"], t_kill),
                "relaunched_at_s": rel(launch["time"], t_kill),
                "ready_at_s": rel(ready["time"], t_kill),
                "rendezvous_s": ready.get("rendezvous_s"),
                "restore_s": restored[0]["seconds"] if restored else None,
                "manager_downtime_s": fs.get("downtime_s"), "manager_stop_s": fs.get("stop_s"),
                "manager_relaunch_s": fs.get("relaunch_s"),
                "manager_first_step_s": fs.get("first_step_s")}


def torchrun_recovery(args, rep):
    tmp = tempfile.mkdtemp(prefix="torchrun-elastic-")
    log = os.path.join(tmp, "steps.jsonl")
    cmd = [TORCH_PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
           "--log_dir", os.path.join(tmp, "logs"), "--max_restarts", "3",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
           "--monitor_interval", "1", "--nnodes", "1", "--nproc_per_node", "2",
           os.path.join(ROOT, "bench", "python", "ddp_recovery.py"), "--log", log,
           "--checkpoint", os.path.join(tmp, "ckpt.pt"),
           "--batch-size", str(args.batch_size)]
    job = Job(cmd, os.path.join(tmp, "torchrun.out"), cwd=tmp)
    try:
        def recs(event, restart):
            return [r for r in read_jsonl(log) if r["event"] == event and r["restart"] == restart]
        wait_for(f"torchrun: {args.warm_steps} steps", lambda: len(recs("step", 0)) >= args.warm_steps,
                 args.start_timeout, job)
        victim = [r["pid"] for r in recs("start", 0) if r["rank"] == 1][0]
        if victim not in descendants(job.pid):
            raise RuntimeError(f"torchrun: rank 1's pid {victim} is not under the agent")
        killed_step = recs("step", 0)[-1]["step"]
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        first = wait_for("torchrun: first step after the restart", lambda: recs("step", 1),
                         args.recover_timeout, job)[0]
        started = min(r["time"] for r in recs("start", 1))
        ready = max(r["time"] for r in recs("ready", 1))
        return {"bench": "recovery", "system": "torchrun", "repeat": rep, "shape": "DDP x 2",
                "killed_step": killed_step,
                "kill_to_first_step_s": rel(first["time"], t_kill),
                "workers_started_at_s": rel(started, t_kill), "ready_at_s": rel(ready, t_kill),
                "resume_step": first["step"] - 1}
    except Exception:
        note("torchrun output:\n" + job.tail())
        raise
    finally:
        job.stop()
        cleanup(tmp)


def morph_one(m, args, generation, slots, direction):
    m.wait_steps(generation, args.morph_warm_steps, args.start_timeout)
    t_edit = m.replace_machines(f"localhost slots={slots}\n")
    nxt = generation + 1
    first = m.wait_steps(nxt, 1, args.recover_timeout)[0]
    fs = m.wait_event("first_step", nxt, 10)
    changed = [e for e in m.events("machines_changed") if e["time"] >= t_edit - 0.01]
    signalled = m.events("morph", generation)[0]
    stopped = m.events("rank_stopped", generation)
    stop_step = max(e.get("step", 0) for e in stopped) if stopped else None
    saves = m.events("checkpoint", generation)
    final = [e for e in saves if e.get("step") == stop_step] or saves[-1:]
    launch = m.events("launch", nxt)[0]
    last_old = m.steps(generation)[-1]
    before = [r["step_time_s"] for r in m.steps(generation) if "step_time_s" in r][1:]
    return {"bench": "morph", "system": "mitra", "direction": direction,
            "from": signalled.get("from"), "to": f"{launch['stages']} x {launch['replicas']}",
            "kept": len(launch.get("kept", [])),
            "started": launch["stages"] * launch["replicas"] - len(launch.get("kept", [])),
            "signalled_step": signalled.get("step"), "stopped_step": stop_step,
            "detect_s": rel(changed[0]["time"], t_edit) if changed else None,
            # The stop signal sent -> the first step of the new generation read by the manager.
            "downtime_s": rel(first["time"], signalled["time"]),
            # The last step of the old shape -> the first of the new (both as the manager read
            # them): the downtime without the step in flight when the signal came.
            "last_step_to_first_step_s": rel(first["time"], last_old["time"]),
            "ranks_stopped_s": rel(max(e["time"] for e in stopped), signalled["time"]),
            # The manager's split of the same downtime (its first_step record).
            **{k: fs.get(k) for k in ("stop_s", "relaunch_s", "ready_s", "load_s",
                                      "first_step_s")},
            "step_time_before_s": median(before),
            "checkpoint_write_s": round(final[0]["total_s"], 3) if final else None,
            "edit_to_first_step_s": rel(first["time"], t_edit)}


def morph(args, path):
    """path: "regroup" (the default) or "restart" (--no-regroup)."""
    out = []
    with mitra_job(args, "mitra-morph-", "localhost slots=4\n", 2, "bench",
                   [] if path == "regroup" else ["--no-regroup"]) as m:
        for rep in range(args.repeats):
            for direction, slots in (("shrink", 2), ("grow", 4)):
                out.append(dict(morph_one(m, args, len(out), slots, direction), repeat=rep,
                                path=path))
                emit(out[-1])
    return out


# ---------------------------------------------------------------------------------------
# State from peers: what a morph and a heal cost when the state comes from memory

STEADY_STEPS = 3


def first_after(m, generation):
    """The first step record of `generation`, when the generation before it had done its last step
    on every rank (old_shape_end), and the median time of the STEADY_STEPS steps after the first
    (a step of the new shape once the change is over)."""
    steps = m.wait_steps(generation, 1 + STEADY_STEPS, 900)
    return steps[0], old_shape_end(m, generation - 1), steady_step(steps)


def old_shape_end(m, generation):
    """When `generation`'s last step was done on every rank: the step in flight at a change ends
    there. Rank 0's step record, or the manager's `rank_stopped` record of a rank that finished
    later (each rank stops once its update is done; the four updates share two cores, and the
    last can end 0.2 s after rank 0's); the gap past it is the change's own."""
    times = [m.steps(generation)[-1]["time"]]
    times += [e["time"] for e in m.events("rank_stopped", generation)]
    return {"time": max(times), "after_rank_0_s": round(max(times) - times[0], 3)}


def steady_step(steps):
    """The median time of the STEADY_STEPS steps after the first of `steps`."""
    return median([r["step_time_s"] for r in steps[1:1 + STEADY_STEPS]])


def first_step_work(m, generation, first):
    """The first step's own time less what it waited for the optimizer state still arriving from
    peers (the `restored` record's first_step_wait_s, the slowest rank's): its computing."""
    restored = m.events("restored", generation)
    wait = restored[0].get("first_step_wait_s", 0) if restored else 0
    return first["step_time_s"] - wait, wait


def overheads(gap, work, steady):
    """The change's cost two ways: the gap less the first step's computing (the issue's measure:
    the stop, the regroup, the blocking transfer, and what the first step waited for the rest)
    and less a steady step (everything, the first step's own slowdowns included: a fresh
    process's first allocations, the background checkpoint's preparation, the transfer's
    share of the CPU)."""
    return {"overhead_s": round(gap - work, 3), "overhead_vs_steady_s": round(gap - steady, 3)}


def state_record(fs):
    return {k: fs.get(k) for k in ("state_kept", "state_peer", "state_checkpoint",
                                   "peer_bytes", "peer_bytes_per_s")}


def peers_morphs(args, model):
    """2 x 2 -> 2 x 1 -> 2 x 2 (P kept), `model`: the gap between the old shape's last step and
    the new shape's first, less that first step's own time."""
    out = []
    with mitra_job(args, "mitra-peers-", "localhost slots=4\n", 2, model, ["--chunk-size", "4"],
                   batch=args.peers_batch_size) as m:
        for generation, (direction, slots) in enumerate((("shrink", 2), ("grow", 4))):
            m.wait_steps(generation, args.peers_warm_steps, args.start_timeout)
            m.replace_machines(f"localhost slots={slots}\n")
            first, old_end, steady = first_after(m, generation + 1)
            fs = m.wait_event("first_step", generation + 1, 60)
            morph_record = m.events("morph", generation)[0]
            resumed = m.events("launch", generation + 1)[0].get("resume_step")
            # The background save of the first step after the resume, during the next steps.
            save = wait_for("the checkpoint after the morph", lambda: [
                c for c in m.events("checkpoint", generation + 1)
                if c.get("step") == resumed + 1], 120, m.job)[0]
            # The step the save's copy and writes run beside: the one after the saved step.
            beside = [r for r in m.steps(generation + 1) if r.get("step") == save["step"] + 1]
            gap = first["time"] - old_end["time"]
            work, wait = first_step_work(m, generation + 1, first)
            out.append({"bench": "peers_morph", "model": model, "direction": direction,
                        "from": morph_record.get("from"), "state": morph_record.get("state"),
                        "first_step_time_s": round(first["step_time_s"], 3),
                        "first_step_wait_s": round(wait, 3),
                        "steady_step_time_s": round(steady, 3),
                        "last_step_to_first_step_s": round(gap, 3),
                        "last_rank_after_rank_0_s": old_end["after_rank_0_s"],
                        **overheads(gap, work, steady),
                        "manager_downtime_s": fs.get("downtime_s"),
                        **state_record(fs),
                        "checkpoint_after_blocked_s": round(save.get("blocked_s", 0), 3),
                        "checkpoint_after_total_s": round(save.get("total_s", 0), 3),
                        "checkpoint_after_step_time_s":
                            round(beside[0]["step_time_s"], 3) if beside else None})
            emit(out[-1])
    return out


def peers_kill(args, model):
    """2 x 2 with a spare, --checkpoint-every 100: a replica of stage --heal-stage is killed. The
    spare is meant for stage 0 and has built it by then: stage 1 measures a heal whose spare
    builds the failed rank's stage after the failure."""
    with mitra_job(args, "mitra-heal-", "localhost slots=4\n", 2, model,
                   ["--chunk-size", "4", "--spares", "1", "--checkpoint-every", "100"],
                   batch=args.peers_batch_size) as m:
        m.wait_steps(0, args.peers_warm_steps, args.start_timeout)
        launch = m.events("launch", 0)[0]
        victim_rank = int(launch["stage_to_rank_map"].split(";")[args.heal_stage].split(",")[1])
        m.wait_spare_parked(args.start_timeout)
        t_kill = time.time()
        os.kill(launch["pids"][victim_rank], signal.SIGKILL)
        steps = m.wait_steps(1, 1 + STEADY_STEPS, args.recover_timeout)
        first, steady = steps[0], steady_step(steps)
        work, wait = first_step_work(m, 1, first)
        fs = m.wait_event("first_step", 1, 60)
        trained_before = max(r["step"] for r in m.steps(0))
        resumed = m.events("launch", 1)[0].get("resume_step")
        return {"bench": "peers_heal", "model": model, "killed_rank": victim_rank,
                "killed_stage": args.heal_stage,
                "last_step_before_kill": trained_before, "resume_step": resumed,
                "steps_retrained": trained_before - resumed,
                "kill_to_first_step_s": rel(first["time"], t_kill),
                "first_step_time_s": round(first["step_time_s"], 3),
                "first_step_wait_s": round(wait, 3),
                "steady_step_time_s": round(steady, 3),
                "kill_to_first_step_less_that_step_s": round(first["time"] - t_kill - work, 3),
                "kill_to_first_step_less_a_step_s": round(first["time"] - t_kill - steady, 3),
                # 0 when the spare took the place; 1 when it had not parked by the kill, and the
                # heal started a process instead.
                "workers_started": fs.get("started"),
                **state_record(fs)}


def sample_trace(prefix):
    """step -> the dataset indices of its global batch, replicas in order, as the newest
    generation that began the step traced them (tests/worker/gpt_helpers.h reads the same)."""
    seen = {}
    folder, stem = os.path.dirname(prefix), os.path.basename(prefix) + ".gen-"
    for name in os.listdir(folder):
        if not name.startswith(stem):
            continue
        generation = int(re.match(r"\d+", name[len(stem):]).group())  # STEM.gen-G.rank-R
        with open(os.path.join(folder, name)) as f:
            for line in f:
                words = line.split()
                if len(words) >= 2:
                    by_replica = seen.setdefault(int(words[0]), {}).setdefault(generation, {})
                    by_replica[int(words[1])] = [int(w) for w in words[2:]]
    out = {}
    for step, generations in seen.items():
        newest = generations[max(generations)]
        out[step] = [i for replica in sorted(newest) for i in newest[replica]]
    return out


def chaos_job(args, tmp, name, slots, stages, extra=()):
    run_dir, trace = os.path.join(tmp, name), os.path.join(tmp, name + ".samples")
    machines = os.path.join(tmp, name + ".machines")
    with open(machines, "w") as f:
        f.write(f"localhost slots={slots}\n")
    cmd = [f"{args.build}/bin/mitra", "run", "--machines", machines, "--batch-size", "16",
           "--nstages", str(stages), "--chunk-size", "4", "--max-steps", str(args.chaos_steps),
           "--run-dir", run_dir, *extra, "--", f"{args.build}/bin/gpt_train", "--model", "tiny",
           "--seed", "11", "--lr", "1e-3"]
    job = Job(cmd, os.path.join(tmp, name + ".out"), cwd=tmp, run_dir=run_dir,
              env=dict(os.environ, MITRA_TRACE_SAMPLES=trace))
    return job, run_dir, trace, machines


def chaos(args):
    tmp = tempfile.mkdtemp(prefix="mitra-chaos-")
    jobs = []
    try:
        ref_job, ref_dir, ref_trace, _ = chaos_job(args, tmp, "uninterrupted", 1, 1)
        jobs.append(ref_job)
        wait_for("the uninterrupted job", lambda: ref_job.poll() is not None,
                 args.chaos_steps * 2 + 120)
        ref = {m["step"]: m["loss"] for m in read_jsonl(os.path.join(ref_dir, "metrics.jsonl"))
               if "loss" in m}
        job, run_dir, trace, machines = chaos_job(
            args, tmp, "chaos", 4, 2, ["--checkpoint-every", "50", "--spares", "1",
                                       "--heartbeat-timeout", "2", "--max-restarts", "40"])
        jobs.append(job)
        random = __import__("random").Random(args.chaos_seed)
        slots, events = 4, []
        metrics = lambda: read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
        newest = lambda: max((m["step"] for m in metrics() if "loss" in m), default=0)
        for at in range(60, args.chaos_steps - 120, 60):
            wait_for(f"step {at}", lambda: newest() >= at, 180, job)
            launches = [e for e in read_jsonl(os.path.join(run_dir, "events.jsonl"))
                        if e.get("event") == "launch"]
            pids = [p for p in (launches[-1].get("pids", []) if launches else []) if p]
            kind = random.choice(["list", "kill", "stop"])
            if kind == "list":
                slots = 2 if slots == 4 else 4
                with open(machines + ".new", "w") as f:
                    f.write(f"localhost slots={slots}\n")
                os.replace(machines + ".new", machines)
                events.append(f"list {slots}")
            elif pids:
                victim = random.choice(pids)
                try:
                    os.kill(victim, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
                    events.append(kind)
                except ProcessLookupError:
                    events.append(kind + " (gone)")
        wait_for("the chaos job", lambda: job.poll() is not None, 900)
        records = [m for m in metrics() if "loss" in m]
        last = {}
        for m in records:
            last[m["step"]] = m["loss"]
        launches = [e for e in read_jsonl(os.path.join(run_dir, "events.jsonl"))
                    if e.get("event") == "launch"]
        changes = []
        for previous, launch in zip(launches, launches[1:]):
            before = [m["step"] for m in records if m.get("generation", 0) < launch["generation"]]
            resumed = launch.get("resume_step", 0)
            changes.append({"generation": launch["generation"],
                            "shape_before": f"{previous['stages']}x{previous['replicas']}",
                            "from_memory": launch.get("held_step") is not None and
                            launch.get("held_step") == resumed,
                            "steps_retrained": max(before, default=0) - resumed})
        memory = [c for c in changes if c["from_memory"]]
        storage = [c for c in changes if not c["from_memory"]]
        gaps = [abs(last[s] - ref[s]) for s in ref if s in last]
        return {"bench": "chaos", "steps": args.chaos_steps, "seed": args.chaos_seed,
                "exit_code": job.returncode, "events": events,
                "every_step_trained": sorted(last) == list(range(1, args.chaos_steps + 1)),
                "step_records": len(records),
                "largest_loss_difference": max(gaps) if gaps else None,
                "samples_as_uninterrupted": sample_trace(trace) == sample_trace(ref_trace),
                "changes": len(changes), "from_memory": len(memory),
                "from_checkpoint": len(storage),
                "steps_retrained_from_memory": sum(c["steps_retrained"] for c in memory),
                "most_retrained_from_memory": max((c["steps_retrained"] for c in memory),
                                                  default=0),
                "steps_retrained_from_checkpoint": sum(c["steps_retrained"] for c in storage),
                # Where a change went back to a checkpoint: the shape it left (x1: no replica).
                "from_checkpoint_shapes_before": [c["shape_before"] for c in storage]}
    finally:
        for j in jobs:
            j.stop()
        cleanup(tmp)


def describe(args, model):
    env = dict(os.environ, MITRA_DESCRIBE="1")
    out = subprocess.run([f"{args.build}/bin/gpt_train", "--model", model], env=env,
                         capture_output=True, text=True, timeout=300).stdout
    for line in out.splitlines():
        if line.startswith("@mitra ") and '"describe"' in line:
            return json.loads(line[len("@mitra "):])
    raise RuntimeError(f"gpt_train --model {model} printed no describe record")


def segment_state_bytes(record):
    """Bytes of each segment's state as it travels: parameters, AdamW's two moments and its
    step count (8 bytes per parameter tensor), and buffers (fp32 throughout)."""
    out = {}
    for kind, text in (("param", record.get("parameters", "")), ("buffer", record.get("buffers", ""))):
        for item in text.split():
            name, dims = item.split("[", 1)
            n = 1
            for d in dims.rstrip("]").split(","):
                if d:
                    n *= int(d)
            seg = name.split(".", 1)[0]
            out[seg] = out.get(seg, 0) + (n * 4 * 3 + 8 if kind == "param" else n * 4)
    return out


def pipeline_friendly_profile(record, slots):
    """A made-up profile in which pipelines win (an all-reduce costs seconds, messages move at
    once) but each send call costs its caller 20 ms, so that schedules of one chunk per rank,
    which send half the messages, beat interleaved and zb-v (whose ranks hold no stage's whole
    state, so they morph through a checkpoint): with four micro-batches the planner picks 2 x 1
    1f1b on 2 slots and 4 x 1 1f1b on 4, a grow that changes P."""
    names = [p.split(".", 1)[0] for p in record["parameters"].split()]
    segments = list(dict.fromkeys(names))
    mbs = [1, 2, 4, 8]
    def seg(name):
        costs = [{"micro_batch": mb, "forward_s": 0.002 * mb, "forward_nograd_s": 0.002 * mb,
                  "backward_s": 0.004 * mb, "output_bytes": 16384 * mb,
                  "graph_bytes": 65536 * mb} for mb in mbs]
        return {"name": name, "parameters": 10000, "parameter_bytes": 40000, "buffer_bytes": 0,
                "optimizer_bytes": 80000, "update_s": 0, "costs": costs}
    return {"format": 1, "program": "gpt_train", "program_args": [], "micro_batches": mbs,
            "machines": [{"address": "localhost", "slots": slots, "memory_bytes": 0,
                          "sample_s": 0, "speed": [1] * slots,
                          "segments": [seg(n) for n in segments]}],
            "comm": {"step_sync_s": 0,
                     "links": [{"from": "localhost", "to": "localhost", "latency_s": 0,
                                "bytes_per_s": 1e12, "samples": [], "send_latency_s": 0.02,
                                "send_bytes_per_s": 1e12}],
                     "allreduce": [{"group": 2, "latency_s": 10, "bytes_per_s": 1e9,
                                    "samples": []}]}}


def ranges(partition):
    out, first = [], 0
    for n in (int(x) for x in partition.split(",")):
        out.append((first, first + n))
        first += n
    return out


def peers_change_p(args, model):
    """2 x 1 -> 4 x 1 (the planner's choice under a made-up profile): the segments that change
    owner move between ranks. Their bytes, from the model's description, against those sent."""
    record = describe(args, model)

    def write_profile(tmp):
        os.makedirs(os.path.join(tmp, "profile"))
        with open(os.path.join(tmp, "profile", "profile.json"), "w") as f:
            json.dump(pipeline_friendly_profile(record, 4), f)

    with mitra_job(args, "mitra-repartition-", "localhost slots=2\n", 0, model,
                   ["--chunk-size", "4", "--profile", "profile"],
                   batch=2 * args.peers_batch_size,  # four micro-batches (see the profile)
                   prepare=write_profile) as m:
        m.wait_steps(0, args.peers_warm_steps, args.start_timeout)
        m.replace_machines("localhost slots=4\n")
        first, old_end, steady = first_after(m, 1)
        fs = m.wait_event("first_step", 1, 60)
        old, new = m.events("launch", 0)[0], m.events("launch", 1)[0]
        # A kept worker keeps its pid: the new rank of old rank r's process holds old stage r
        # (P x 1: rank r is stage r), whichever new rank the manager gave it.
        held_by_pid = dict(zip(old["pids"], ranges(old["partition"])))
        sizes = segment_state_bytes(record)
        names = list(dict.fromkeys(p.split(".", 1)[0] for p in record["parameters"].split()))
        moved = 0
        for r, (a, b) in enumerate(ranges(new["partition"])):
            mine = held_by_pid.get(new["pids"][r], (0, 0))
            moved += sum(sizes[names[i]] for i in range(a, b) if not mine[0] <= i < mine[1])
        return {"bench": "peers_change_p", "model": model,
                "from": f"{old['stages']} x {old['replicas']} ({old['partition']})",
                "to": f"{new['stages']} x {new['replicas']} ({new['partition']})",
                "changed_owner_bytes": moved, **state_record(fs),
                "first_step_time_s": round(first["step_time_s"], 3),
                "steady_step_time_s": round(steady, 3),
                "last_rank_after_rank_0_s": old_end["after_rank_0_s"],
                **overheads(first["time"] - old_end["time"], first_step_work(m, 1, first)[0],
                            steady)}


LOOPBACK_SENDER = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
block = bytes(4 << 20)
for _ in range(int(sys.argv[2])):
    s.sendall(block)
s.close()
"""


def loopback_bandwidth(total_mb=1024):
    """One TCP stream over loopback between two processes, 4 MiB writes: bytes per second."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    sender = subprocess.Popen([sys.executable, "-c", LOOPBACK_SENDER, str(port),
                               str(total_mb // 4)])
    conn, _ = server.accept()
    got, buf, t0 = 0, bytearray(4 << 20), time.time()
    view = memoryview(buf)
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        got += n
    seconds = time.time() - t0
    sender.wait(timeout=60)
    conn.close()
    server.close()
    return {"bench": "loopback_tcp", "bytes": got, "seconds": round(seconds, 3),
            "bytes_per_s": round(got / seconds)}


def peers(args):
    out = {"loopback": loopback_bandwidth()}
    emit(out["loopback"])
    parts = set(args.peers_parts.split(","))
    for model in args.peers_models.split(","):
        out[model] = {}
        if "morphs" in parts:
            out[model]["morphs"] = peers_morphs(args, model)
        if "heal" in parts:
            out[model]["heal"] = peers_kill(args, model)
            emit(out[model]["heal"])
        if "change_p" in parts:
            out[model]["change_p"] = peers_change_p(args, model)
            emit(out[model]["change_p"])
    return out


def peers_targets(result):
    targets = {}
    models = [k for k in result if k != "loopback"]
    measured = lambda part: [m for m in models if part in result[m]]  # noqa: E731 (--peers-parts)
    overhead = {m: max(r["overhead_s"] for r in result[m]["morphs"]) for m in measured("morphs")}
    if overhead:
        targets["kept_p_morph_overhead_le_0_3s"] = {
            **{f"{m}_worst_s": overhead[m] for m in overhead},
            **{f"{m}_worst_vs_steady_s": max(r["overhead_vs_steady_s"]
                                             for r in result[m]["morphs"]) for m in overhead},
            "met": all(v <= 0.3 for v in overhead.values())}
    if "bench" in overhead and "large" in overhead and overhead["bench"] > 0:
        targets["kept_p_morph_large_over_bench_le_1_5"] = {
            "ratio": round(overhead["large"] / overhead["bench"], 2),
            "met": overhead["large"] / overhead["bench"] <= 1.5}
    loop = result["loopback"]["bytes_per_s"]
    change = {}
    for m in measured("change_p"):
        c = result[m]["change_p"]
        rate = c.get("peer_bytes_per_s") or 0
        change[m] = {"changed_owner_bytes": c["changed_owner_bytes"],
                     "peer_bytes": c.get("peer_bytes"),
                     "rate_over_loopback": round(rate / loop, 3),
                     "met": c.get("peer_bytes") == c["changed_owner_bytes"] and rate >= 0.5 * loop}
    if change:
        targets["change_p_moves_the_changed_segments_at_half_loopback"] = change
    heal = {}
    for m in measured("heal"):
        h = result[m]["heal"]
        limit = 0.3 if m == "bench" else 2.0
        heal[m] = {"steps_retrained": h["steps_retrained"],
                   "kill_to_first_step_less_that_step_s": h["kill_to_first_step_less_that_step_s"],
                   "kill_to_first_step_s": h["kill_to_first_step_s"], "limit_s": limit,
                   "met": h["steps_retrained"] == 0 and
                          h["kill_to_first_step_less_that_step_s"] <= limit}
    if heal:
        targets["heal_retrains_nothing"] = heal
    return targets


# ---------------------------------------------------------------------------------------
# SSH hosts on loopback

SSH_MISSING = ("cannot do yet", "not available in this build", "without SSH support")


def ssh_supported(args):
    """Asks the build: a list with one SSH host, and the answer within a few seconds."""
    tmp = tempfile.mkdtemp(prefix="mitra-ssh-probe-")
    try:
        m = Mitra(args, tmp, f"127.0.0.2:{free_port()} slots=1\n", 1, "tiny")
        try:
            def answer():
                text = m.job.tail(20000)
                for line in text.splitlines():
                    if any(s in line for s in SSH_MISSING) and ("SSH" in line or "ssh" in line):
                        return ("missing", line.strip())
                    if "cannot connect" in line or "Connection refused" in line:
                        return ("tried", line.strip())  # it did try: nothing listens there
                return None
            try:
                kind, line = wait_for("ssh probe", answer, 15, m.job, poll=0.1)
            except (TimeoutError, RuntimeError):
                kind, line = answer() or ("tried", None)  # it may have exited with the answer
            return kind != "missing", line
        finally:
            m.job.stop(grace=5)
    finally:
        cleanup(tmp)


def keygen(path, kind="ed25519"):
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    with open(path + ".pub") as f:
        return f.read().strip()


def start_sshds(sshd, tmp, hosts, daemons):
    """One sshd per address, all on one port, with a host key and a user key made here.
    Fills daemons (address -> Job); returns (port, known_hosts, user key)."""
    os.makedirs("/run/sshd", exist_ok=True)
    user_key = os.path.join(tmp, "id_ed25519")
    user_pub = keygen(user_key)
    host_pub = keygen(os.path.join(tmp, "host_ed25519"))
    with open(os.path.join(tmp, "authorized_keys"), "w") as f:
        f.write(user_pub + "\n")
    port = free_port()
    known = os.path.join(tmp, "known_hosts")
    with open(known, "w") as f:
        for h in hosts:
            f.write(f"[{h}]:{port} {' '.join(host_pub.split()[:2])}\n")
    for h in hosts:
        cfg = os.path.join(tmp, f"sshd-{h}.conf")
        with open(cfg, "w") as f:
            f.write(f"ListenAddress {h}\nPort {port}\n"
                    f"HostKey {tmp}/host_ed25519\n"
                    f"AuthorizedKeysFile {tmp}/authorized_keys\n"
                    f"PidFile {tmp}/sshd-{h}.pid\nStrictModes no\nUsePAM no\n"
                    "PasswordAuthentication no\nPermitRootLogin yes\n")
        daemons[h] = Job([sshd, "-D", "-f", cfg, "-E", os.path.join(tmp, f"sshd-{h}.log")],
                         os.path.join(tmp, f"sshd-{h}.out"))
    for h in hosts:
        def listening(h=h):
            try:
                socket.create_connection((h, port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(f"sshd on {h}", listening, 15, daemons[h], poll=0.1)
    return port, known, user_key


def host_failure(args, how):
    """how: "kill" (SIGKILL: the kernel closes the connections at once) or "freeze" (SIGSTOP:
    the host stops answering but nothing is closed, as when it loses power or its network)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    tmp = tempfile.mkdtemp(prefix="mitra-ssh-")
    daemons, m, doomed = {}, None, set()
    hosts = ["127.0.0.2", "127.0.0.3"]
    try:
        port, known, user_key = start_sshds(sshd, tmp, hosts, daemons)
        m = Mitra(args, tmp, "".join(f"{h}:{port} slots=1\n" for h in hosts), 1, "tiny",
                  ["--checkpoint-every", "1", "--known-hosts", known, "--identity", user_key,
                   ])
        m.wait_steps(0, args.warm_steps, args.start_timeout)
        victim = daemons[hosts[1]]
        # Everything the sshd started, and the worker wherever it was reparented to.
        doomed = set(descendants(victim.pid)) | {victim.pid}
        doomed |= {p for p in pids_with_env(f"MITRA_RUN_DIR={m.run_dir}")
                   if f"{hosts[1]} {port}".encode() in environ_of(p)}
        t_kill = time.time()
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
            except ProcessLookupError:
                pass
        failure = m.wait_event("failure", 0, args.recover_timeout)
        first = m.wait_steps(1, 1, args.recover_timeout)[0]
        fs = m.wait_event("first_step", 1, 10)
        launch = m.events("launch", 1)[0]
        restored = m.events("restored", 1)
        return {"bench": "host", "system": "mitra", "how": how, "host": f"{hosts[1]}:{port}",
                "failure_reason": failure.get("reason"),
                "detect_s": rel(failure["time"], t_kill),
                "kill_to_first_step_s": rel(first["time"], t_kill),
                "relaunched_at_s": rel(launch["time"], t_kill),
                "new_shape": f"{launch['stages']} x {launch['replicas']}",
                "restore_s": restored[0]["seconds"] if restored else None,
                "manager_downtime_s": fs.get("downtime_s")}
    except Exception:
        if m:
            note("mitra output:\n" + m.job.tail())
        raise
    finally:
        if m:
            m.job.stop()
        kill_all(doomed)  # SIGKILL ends stopped processes too
        for d in daemons.values():
            d.kill()
        cleanup(tmp)


# ---------------------------------------------------------------------------------------

def on_sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="build directory with bin/mitra and bin/gpt_train (default: build)")
    p.add_argument("--repeats", type=int, default=3,
                   help="recoveries per system, morphs per direction (default 3)")
    p.add_argument("--quick", action="store_true", help="smoke run: one repeat")
    p.add_argument("--stages", type=int, default=1, choices=(1, 2),
                   help="mitra's recovery job: 1 (2 replicas, like DDP; default) or 2 stages")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--spares", type=int, default=1,
                   help="mitra's recovery job: standby workers per machine (default 1; 0: the "
                        "killed worker's place starts a process)")
    p.add_argument("--warm-steps", type=int, default=30,
                   help="steps before a worker is killed (default 30)")
    p.add_argument("--morph-warm-steps", type=int, default=5,
                   help="steps of each shape before the list is edited (default 5)")
    p.add_argument("--start-timeout", type=float, default=180,
                   help="seconds a job may take to reach its warm-up steps (default 180)")
    p.add_argument("--recover-timeout", type=float, default=120,
                   help="seconds a recovery or morph may take (default 120)")
    p.add_argument("--skip-ssh", action="store_true", help="leave out part 3 (same as "
                   "--parts recovery,morph)")
    p.add_argument("--parts", default="recovery,morph,host",
                   help="which parts to run (default recovery,morph,host; peers: part 4; "
                        "chaos: part 5)")
    p.add_argument("--peers-models", default="bench,large",
                   help="part peers: the GPT models (default bench,large)")
    p.add_argument("--peers-parts", default="morphs,heal,change_p",
                   help="part peers: which measurements (default morphs,heal,change_p; the "
                        "targets of the others are left out)")
    p.add_argument("--heal-stage", type=int, default=0, choices=(0, 1),
                   help="part peers: the stage whose replica the heal kills (default 0, the "
                        "stage the spare has built)")
    p.add_argument("--peers-batch-size", type=int, default=8,
                   help="part peers: the global batch, in micro-batches of 4 (default 8)")
    p.add_argument("--peers-warm-steps", type=int, default=4,
                   help="part peers: steps of each shape before a change (default 4)")
    p.add_argument("--chaos-steps", type=int, default=900,
                   help="part chaos: steps of the job (default 900)")
    p.add_argument("--chaos-seed", type=int, default=2026,
                   help="part chaos: the seed of the changes' kinds and victims (default 2026)")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary run directories and logs (paths on stderr)")
    args = p.parse_args()
    global KEEP
    KEEP = args.keep
    # A SIGTERM unwinds like Ctrl-C, so every job is still killed on the way out.
    signal.signal(signal.SIGTERM, on_sigterm)
    args.build = os.path.abspath(args.build)
    if args.quick:
        args.repeats = 1
    for binary in ("mitra", "gpt_train"):
        if not os.access(f"{args.build}/bin/{binary}", os.X_OK):
            sys.exit(f"elastic: {args.build}/bin/{binary} is missing; build the tree first")

    parts = set(args.parts.split(","))
    if args.skip_ssh:
        parts.discard("host")
    rec = {"mitra": [], "torchrun": []}
    for rep in range(args.repeats if "recovery" in parts else 0):
        order = ("mitra", "torchrun") if rep % 2 == 0 else ("torchrun", "mitra")
        for system in order:
            r = (mitra_recovery if system == "mitra" else torchrun_recovery)(args, rep)
            rec[system].append(r)
            emit(r)
    morphs = morph(args, "regroup") + morph(args, "restart") if "morph" in parts else []
    peers_result = peers(args) if "peers" in parts else None
    chaos_result = chaos(args) if "chaos" in parts else None
    if chaos_result:
        emit(chaos_result)
    hosts = []
    if "host" in parts:
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        ok, why = (ssh_supported(args) if os.path.exists(sshd)
                   else (False, "sshd is not installed (openssh-server)"))
        for how in ("kill", "freeze"):
            if not ok:
                hosts.append({"bench": "host", "how": how, "skipped": f"mitra run: {why}"})
            else:
                try:
                    hosts.append(host_failure(args, how))
                except Exception as e:  # optional part: say so and still print the summary
                    hosts.append({"bench": "host", "how": how,
                                  "skipped": f"failed: {type(e).__name__}: {e}"})
            emit(hosts[-1])

    mitra_s = median(r["kill_to_first_step_s"] for r in rec["mitra"])
    torch_s = median(r["kill_to_first_step_s"] for r in rec["torchrun"])
    restore = median(r["restore_s"] for r in rec["mitra"]) or 0
    measured = [h for h in hosts if "skipped" not in h]
    targets = {}
    keys = ("kept", "started", "detect_s", "downtime_s", "last_step_to_first_step_s",
            "ranks_stopped_s", "stop_s",
            "relaunch_s", "ready_s", "load_s", "first_step_s", "step_time_before_s",
            "checkpoint_write_s", "edit_to_first_step_s")
    morph_medians = {}
    for r in morphs:
        morph_medians.setdefault(f"{r['direction']}_{r['path']}", {"from": r["from"], "to": r["to"]})
    for name, d in morph_medians.items():
        runs = [r for r in morphs if f"{r['direction']}_{r['path']}" == name]
        d.update({k: median(r[k] for r in runs) for k in keys})
    if morphs:
        planned = {}
        for direction in ("shrink", "grow"):
            regroup = morph_medians[f"{direction}_regroup"]
            restart = morph_medians[f"{direction}_restart"]
            planned[direction] = {
                "regroup_last_step_to_first_step_s": regroup["last_step_to_first_step_s"],
                "restart_last_step_to_first_step_s": restart["last_step_to_first_step_s"],
                "restart_over_regroup": round(restart["last_step_to_first_step_s"] /
                                              regroup["last_step_to_first_step_s"], 2),
                "regroup_signal_to_first_step_s": regroup["downtime_s"],
                "restart_signal_to_first_step_s": restart["downtime_s"],
                "restart_over_regroup_from_signal": round(restart["downtime_s"] /
                                                          regroup["downtime_s"], 2)}
        targets["planned_morph_last_step_to_first_step_le_1s"] = {
            **planned,
            "met": all(p["regroup_last_step_to_first_step_s"] <= 1.0 for p in planned.values())}
    targets["dead_host_detect_le_3s"] = {
        **{h["how"]: h["detect_s"] for h in measured},
        "met": all(h["detect_s"] <= 3 for h in measured) if measured else "not measured"}
    recovery = {}
    if mitra_s is not None:
        recovery["local"] = {"kill_to_first_step_s": mitra_s, "limit_s": round(10 + restore, 3),
                             "met": mitra_s <= 10 + restore}
    for h in measured:
        limit = round(10 + (h["restore_s"] or 0), 3)
        recovery[f"host_{h['how']}"] = {"kill_to_first_step_s": h["kill_to_first_step_s"],
                                       "limit_s": limit, "met": h["kill_to_first_step_s"] <= limit}
    targets["recovery_le_10s_plus_checkpoint_load"] = recovery or "not measured"
    if mitra_s is not None:
        targets["killed_worker_kill_to_first_step_le_0_3s"] = {
            "kill_to_first_step_s": mitra_s, "met": mitra_s <= 0.3}
    frozen = [h for h in measured if h["how"] == "freeze"]
    if frozen:
        targets["frozen_host_kill_to_first_step_le_4s"] = {
            "kill_to_first_step_s": frozen[0]["kill_to_first_step_s"],
            "met": frozen[0]["kill_to_first_step_s"] <= 4}
    if mitra_s and torch_s:
        targets["mitra_recovery_faster_than_torchrun"] = {
            "torchrun_over_mitra": round(torch_s / mitra_s, 3), "met": mitra_s < torch_s}
    summary = {
        "bench": "elastic_summary", "repeats": args.repeats,
        "recovery_mitra_kill_to_first_step_s": mitra_s,
        "recovery_mitra_detect_s": median(r["detect_s"] for r in rec["mitra"]),
        "recovery_mitra_ready_at_s": median(r["ready_at_s"] for r in rec["mitra"]),
        "recovery_torchrun_kill_to_first_step_s": torch_s,
        "recovery_torchrun_workers_started_at_s":
            median(r["workers_started_at_s"] for r in rec["torchrun"]),
        "recovery_torchrun_ready_at_s": median(r["ready_at_s"] for r in rec["torchrun"]),
        "torchrun_over_mitra": round(torch_s / mitra_s, 3) if mitra_s and torch_s else None,
        "morph_medians": morph_medians,
        "host": {h["how"]: {k: v for k, v in h.items() if k not in ("bench", "how")}
                 for h in hosts},
        "targets": targets,
        "torchrun_lost_node_floor_reference": {
            "notice_s": 15, "last_call_s": 30,
            "from": "torch.distributed.elastic c10d rendezvous defaults: keep-alive every 5 s, "
                    "3 missed keep-alives mark a node dead; last_call 30 s"},
    }
    if peers_result:
        summary["peers"] = peers_result
        targets["peers"] = peers_targets(peers_result)
    if chaos_result:
        c = chaos_result
        targets["chaos"] = {
            "every_step_once_as_uninterrupted": c["every_step_trained"] and
            c["samples_as_uninterrupted"] and (c["largest_loss_difference"] or 0) <= 4e-4,
            "steps_retrained_from_memory": c["steps_retrained_from_memory"],
            "met": c["exit_code"] == 0 and c["every_step_trained"] and
            c["samples_as_uninterrupted"] and c["steps_retrained_from_memory"] == 0}
    emit(summary)


if __name__ == "__main__":
    main()
