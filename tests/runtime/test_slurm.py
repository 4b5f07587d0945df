"""Slurm requests checked against the partition, pending reasons read (posexp/runtime/slurm.py).

The texts are what the one-node cluster of scripts/slurm_local.sh printed (2 CPUs, 23 GB), plus
a GPU partition in sinfo's format; the real cluster test is tests/scripts/test_slurm_local.py.
"""

from __future__ import annotations

import re

import pytest

from posexp.errors import PosexpError
from posexp.runtime.slurm import (
    NEVER_CLEARS,
    Partition,
    PendingWatch,
    check_request,
    never_clears,
    parse_sinfo,
    parse_squeue,
    request_problem,
)

# sinfo -h -e -o '%P|%c|%m|%G|%l|%D|%s' on the local cluster, then a two-group GPU partition.
LOCAL = "local*|2|23081|(null)|infinite|1|1-infinite\n"
CLUSTER = (
    LOCAL
    + "gpu|64|515000|gpu:a100:8(S:0-1)|2-00:00:00|4|1-4\ngpu|32|256000|gpu:4|2-00:00:00|2|1-4\n"
)
# squeue -h -r -o '%i|%T|%r' for a sweep asking 64 CPUs of a 2-CPU node.
PENDING = "32_0|PENDING|PartitionConfig\n32_1|PENDING|PartitionConfig\n"


def test_sinfo_gives_each_partitions_largest_node_and_the_default():
    parts = parse_sinfo(CLUSTER)
    assert parts["local"] == Partition("local", 2, 23081, 0, None, 1, None)
    assert parts[""] == parts["local"]  # the default, marked *
    assert parts["gpu"] == Partition("gpu", 64, 515000, 8, 2 * 1440, 6, 4)


@pytest.mark.parametrize(
    ("params", "line"),
    [
        (
            {"cpus_per_task": 64},
            "hydra.launcher.cpus_per_task=64 cannot run on Slurm partition "
            "'local': its largest node has 2 CPUs; lower it, or pick another partition "
            "(no partition here fits)",
        ),
        (
            {"cpus_per_task": 1, "tasks_per_node": 4},
            "hydra.launcher.cpus_per_task=1 (x tasks_per_node=4) cannot run",
        ),
        (
            {"mem_gb": 32},
            "hydra.launcher.mem_gb=32 cannot run on Slurm partition 'local': its "
            "largest node has 22.5 GB",
        ),
        (
            {"gpus_per_node": 1},
            "hydra.launcher.gpus_per_node=1 cannot run on Slurm partition "
            "'local': its largest node has 0 GPUs; lower it (hydra/launcher=submitit_slurm_cpu asks "
            "no GPU)",
        ),
        (
            {"nodes": 2},
            "hydra.launcher.nodes=2 cannot run on Slurm partition 'local': its largest "
            "node has 1 node per job",
        ),
    ],
)
def test_a_request_no_node_can_run_is_named_with_what_there_is(params, line):
    with pytest.raises(PosexpError, match="^" + re.escape(line)):
        check_request(params, LOCAL)


def test_the_time_limit_and_an_unknown_partition_are_checked():
    line = request_problem({"timeout_min": 3000, "partition": "gpu"}, parse_sinfo(CLUSTER))
    assert line.startswith(
        "hydra.launcher.timeout_min=3000 cannot run on Slurm partition 'gpu': its largest node "
        "has a time limit of 2880 min"
    )
    assert line.endswith("(hydra.launcher.partition=local fits)")  # where it would run
    with pytest.raises(
        PosexpError, match=r"^Slurm partition 'cpu' does not exist here; partitions: gpu, local"
    ):
        check_request({"partition": "cpu"}, CLUSTER)


def test_a_request_that_fits_passes():
    check_request(
        {
            "cpus_per_task": 8,
            "gpus_per_node": 8,
            "mem_gb": 400,
            "timeout_min": 240,
            "partition": "gpu",
            "nodes": 1,
        },
        CLUSTER,
    )
    check_request({"cpus_per_task": 1, "mem_gb": 4, "timeout_min": 60, "gpus_per_node": 0}, LOCAL)


def test_a_reason_that_never_clears_ends_the_watch_and_names_the_job(tmp_path):
    assert "PartitionConfig" in NEVER_CLEARS and "Resources" not in NEVER_CLEARS
    assert never_clears("QOSMaxCpuPerJobLimit") and not never_clears("QOSMaxCpuPerUserLimit")
    watch = PendingWatch(tmp_path, patience_min=10)
    line = watch.check(parse_squeue(PENDING))
    assert watch.unsatisfiable == ("32_0", "PartitionConfig")
    assert line.startswith("Slurm job 32_0 can never start (pending, reason PartitionConfig): ")
    assert line.endswith("; the sweep's jobs were cancelled")


def test_waiting_for_resources_is_said_once_after_the_patience(tmp_path, caplog):
    watch = PendingWatch(tmp_path, patience_min=0)  # every wait is past it
    busy = parse_squeue("40_0|PENDING|Resources\n40_1|RUNNING|None\n")
    with caplog.at_level("WARNING", logger="posexp"):
        watch.check(busy)
        watch.check(busy)
    said = [r.getMessage() for r in caplog.records if r.name == "posexp"]
    assert len(said) == 1 and said[0].startswith("Slurm job 40_0 has been pending for")
    assert "(reason Resources); still waiting" in said[0] and watch.unsatisfiable is None


def test_the_watch_finds_the_sweeps_job_arrays_by_submitits_folders(tmp_path):
    for name in ("32", "32_0", "32_1", "41_0"):
        (tmp_path / name).mkdir()
    assert PendingWatch(tmp_path, None).job_ids() == ["32", "41"]
