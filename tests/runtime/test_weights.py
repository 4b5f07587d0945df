"""Starting from saved weights: a network that cannot take them is one line, before any data work."""

from __future__ import annotations

import pytest
import torch

import posexp.commands.train as train_module
from posexp.commands.train import run_training
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.runtime.weights import check_start_weights, load_model, saved_model_config
from posexp.store.checkpoint import load_state, load_weights, save_checkpoint
from posexp.store.rundir import RunDir
from tests.helpers import run_config
from tests.store.test_rundir import make_run

TINY = ("model=tiny", "train.seq_len=32", "train.eval_tokens=64", "device=cpu")


def saved_run(path, *overrides: str, vocab_size: int = 260):
    """A run dir holding a checkpoint of the tiny network ``overrides`` describe."""
    cfg = run_config(*TINY, *overrides)
    model = GPT(
        ModelConfig(
            vocab_size=vocab_size,
            d_model=64,
            n_layers=2,
            n_heads=cfg.heads,
            pe=cfg.pe.name,
            pe_params=dict(cfg.pe.params),
            train_length=32,
        )
    )
    save_checkpoint(path, model, {"step": 2, "model": model.cfg.to_dict(), "config": cfg.to_dict()})
    return model


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if the run gets as far as loading data (a BPE, three tokenized splits)."""

    def refuse(cfg, *kept):
        raise AssertionError("data was built before the saved network was checked")

    monkeypatch.setattr(train_module, "build_data", refuse)


def test_a_parent_with_another_tokenizer_is_refused_before_the_data(tmp_path, no_data):
    saved_run(tmp_path / "parent")
    cfg = run_config(
        *TINY, f"parent={tmp_path / 'parent'}", "tokenizer=bpe", "tokenizer.vocab_size=512"
    )
    with pytest.raises(
        PosexpError,
        match=r"^parent run has tokenizer byte, this run "
        r"bpe\(vocab_size=512\); .* keeps its tokenizer",
    ):
        run_training(cfg, tmp_path / "run")


def test_a_bpe_parent_on_other_data_is_refused(tmp_path):
    saved_run(tmp_path / "parent", "tokenizer=bpe", "tokenizer.vocab_size=512", vocab_size=512)
    cfg = run_config(
        *TINY,
        f"parent={tmp_path / 'parent'}",
        "tokenizer=bpe",
        "tokenizer.vocab_size=512",
        "data=wyc2kjv",
    )
    with pytest.raises(
        PosexpError,
        match=r"^tokenizer=bpe learns its vocabulary from the data: "
        r"the parent's \(data kjv\) is not this run's",
    ):
        check_start_weights(cfg)
    check_start_weights(
        run_config(
            *TINY, f"parent={tmp_path / 'parent'}", "tokenizer=bpe", "tokenizer.vocab_size=512"
        )
    )  # the same data: fine


def test_a_bpe_parent_on_the_same_training_text_is_accepted(tmp_path):
    # wyc2kjv_text is wyc2kjv's documents as a language model: one BPE, so its weights fit.
    bpe = ("tokenizer=bpe", "tokenizer.vocab_size=512")
    saved_run(tmp_path / "parent", *bpe, "data=wyc2kjv_text", vocab_size=512)
    check_start_weights(run_config(*TINY, f"parent={tmp_path / 'parent'}", *bpe, "data=wyc2kjv"))


def test_a_learned_table_of_another_length_is_named_not_called_corrupt(tmp_path, no_data):
    saved_run(tmp_path / "parent", "pe=learned")
    longer = ("pe=learned", "train.seq_len=64", "train.eval_tokens=256")
    for key in ("parent", "resume"):
        cfg = run_config("model=tiny", "device=cpu", *longer, f"{key}={tmp_path / 'parent'}")
        with pytest.raises(
            PosexpError,
            match=rf"^{key}='.*parent' has a pe=learned table of 32 "
            r"positions .* this run's would have 64 .*"
            r"keep train.seq_len=32",
        ):
            run_training(cfg, tmp_path / "run")


def test_a_size_mismatch_names_the_tensor_and_both_shapes(tmp_path):
    saved_run(tmp_path / "run", "pe=learned")
    model = GPT(
        ModelConfig(
            vocab_size=260, d_model=64, n_layers=2, n_heads=4, pe="learned", train_length=64
        )
    )
    with pytest.raises(
        PosexpError,
        match=r"^checkpoint '.*model.safetensors' does not match the "
        r"model: size mismatch for pe.table.weight: checkpoint "
        r"\(32, 64\), model \(64, 64\)$",
    ):
        load_weights(tmp_path / "run", model)


def test_an_unpicklable_state_does_not_suggest_running_its_code(tmp_path):
    save_checkpoint(tmp_path, torch.nn.Linear(2, 2), {"step": 1}, {"step": 1})
    (tmp_path / "checkpoint" / "state.pt").write_bytes(b"garbage\n")
    with pytest.raises(
        PosexpError,
        match=r"^corrupt checkpoint '.*state.pt': not a training "
        r"state posexp can read \(.+\)$",
    ) as e:
        load_state(tmp_path)
    assert "weights_only" not in str(e.value)


@pytest.mark.parametrize(
    "error",
    [
        MemoryError("Unable to allocate 24.6 GiB for an array with shape (100000000, 33)"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 12000000000000 bytes. Error code 12"
        ),
    ],
)
def test_running_out_of_memory_is_one_line_naming_the_sizes(tmp_path, monkeypatch, error):
    def allocate(cfg, run_dir, stop):
        raise error

    monkeypatch.setattr(train_module, "_run_training", allocate)
    cfg = run_config(*TINY, "train.batch_size=100000000")
    with pytest.raises(
        PosexpError,
        match=r"^out of memory \(tried to allocate [\d.e+]+ GiB\): lower "
        r"train.batch_size=100000000, train.seq_len=32 or the model",
    ):
        run_training(cfg, tmp_path / "run")


def test_other_runtime_errors_stay_bugs(tmp_path, monkeypatch):
    def broken(cfg, run_dir, stop):
        raise RuntimeError("shape '[2, 3]' is invalid")

    monkeypatch.setattr(train_module, "_run_training", broken)
    with pytest.raises(RuntimeError, match="is invalid"):
        run_training(run_config(*TINY), tmp_path / "run")


def test_a_parent_with_another_dropout_is_the_same_network():
    from posexp.runtime.weights import check_same_network

    parent = ModelConfig(vocab_size=50, dropout=0.1).to_dict()
    check_same_network(parent, ModelConfig(vocab_size=50))  # no error
    with pytest.raises(PosexpError, match="parent run has n_heads=4, this run n_heads=2"):
        check_same_network(parent, ModelConfig(vocab_size=50, n_heads=2))


def test_resuming_a_sweep_dir_names_its_runs(tmp_path):
    for job in ("seed=0", "seed=1"):
        saved_run(tmp_path / "sweep" / job)
    cfg = run_config(*TINY, f"resume={tmp_path / 'sweep'}")
    with pytest.raises(PosexpError, match=r"is a folder of 2 runs \(seed=0, seed=1\); pass one"):
        check_start_weights(cfg)


def test_the_trained_model_comes_back(tmp_path):
    model = make_run(tmp_path, pe="alibi")
    loaded = load_model(RunDir(tmp_path), torch.device("cpu"))
    assert not loaded.training and loaded.cfg == model.cfg
    assert saved_model_config(RunDir(tmp_path)) == model.cfg
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
