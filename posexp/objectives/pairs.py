"""The ``pairs`` objective: translation as ``source <sep> target <eos>`` for a decoder-only model.

Training batches come from ``PairBatches`` (one example per row, right-padded, loss on target
tokens unless ``data.loss_on=all``), with the columns after the last scored token cut off (exact
under the causal mask, and less compute). Evaluation, every ``train.eval_interval`` steps:

* ``val/loss``, ``val/ppl``: mean loss / perplexity on TARGET tokens (target words and eos) of
  the whole val split, whatever ``data.loss_on`` says;
* ``val/bleu``, ``val/chrf``: sacrebleu scores of beam-search translations of a fixed, evenly spaced
  val subset (``translate.bleu_examples``), with the copy baseline on the same subset beside them
  (``val/copy_bleu``, ``val/copy_chrf``);
* one attention-map image per layer (every head, labelled, colour scale fixed to 0..1) over one
  fixed short val example, and a Markdown table of source / reference / hypothesis samples.

``finish`` translates the whole TEST split (``test/bleu``, ``test/chrf`` and the copy baseline),
writes ``translations_test.tsv`` and the final attention maps (``attention/layer<i>.png``) into
the run dir, and returns the ``final/*`` metrics for results.json and the hparams table.

Decoding is beam search (``translate.beam_size`` 4, ``translate.length_penalty`` 0.6: Vaswani et
al. 2017, Section 6.1; ``beam_size=1`` is greedy) and starts each example at position 0, as in
training. The prompt keeps at most
``seq_len // 2 - 1`` source tokens (training drops the END of an over-long source first, too) and
prompt + output never exceed ``train.seq_len`` tokens: no position is used that training never
saw, and a learned table is never read past its end. Settings (all optional, under ``translate``):
``bleu_examples`` (default 100), ``test_examples`` (default null = all), ``max_new_tokens``
(default null = 2 x source + 10, within seq_len), ``batch_size`` (decoding batch, default 64),
``samples`` (4), ``beam_size`` (4), ``length_penalty`` (0.6); defaults in configs/train.yaml, e.g. ``translate.bleu_examples=50``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posexp.config import RunConfig
from posexp.data import PairBatches
from posexp.errors import PosexpError
from posexp.model.attention_maps import attention_figure, figure_to_array
from posexp.model.generation import TokenProgress, generate_ids
from posexp.objectives.base import Autocast, register_objective
from posexp.scoring.metrics import copy_baseline, translation_scores

log = logging.getLogger("posexp")

# The attention-map example: the first val pair whose full row has this many tokens (else the
# shortest), so a grid of heads stays readable.
ATTENTION_TOKENS = (16, 40)


def evenly_spaced(n: int, k: int | None) -> list[int]:
    """``k`` indices spread evenly over ``range(n)`` (all of them when k is None or >= n)."""
    if k is None or k >= n:
        return list(range(n))
    return sorted({int(i) for i in np.linspace(0, n - 1, k).round()})


def trim(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the columns after the last target that carries loss (exact under a causal mask)."""
    carries = (y != -100).any(0).nonzero()
    width = int(carries.max()) + 1 if len(carries) else 1
    return x[:, :width], y[:, :width]


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


@register_objective("pairs")
class Translation:
    """Source -> target translation; see the module docstring for what it logs."""

    def __init__(self, cfg: RunConfig, data: Any, device: torch.device, autocast: Autocast) -> None:
        t = cfg.train
        pairs = data.corpus.pairs
        for split in ("train", "val", "test"):
            if not pairs.get(split):
                raise PosexpError(
                    f"data={cfg.data.name} has no {split} pairs; a pairs corpus needs all three"
                )
        self.settings = cfg.translate
        self.tokenizer = data.tokenizer
        self.seq_len, self.batch_size = int(t.seq_len), int(t.batch_size)
        self.device, self.autocast = device, autocast
        cache = Path(cfg.cache_dir)
        source = cfg.data.name
        loss_on = cfg.data.params.get("loss_on", "target")
        self.train = PairBatches(
            pairs["train"],
            self.tokenizer,
            t.batch_size,
            t.seq_len,
            cfg.seed,
            loss_on,
            cache,
            key=f"{source}-train",
        )
        # Validation perplexity is always on target tokens, whatever the training loss covers.
        self.val = PairBatches(
            pairs["val"],
            self.tokenizer,
            t.batch_size,
            t.seq_len,
            cfg.seed,
            "target",
            cache,
            key=f"{source}-val",
        )
        self.val_pairs, self.test_pairs = pairs["val"], pairs["test"]
        self.bleu_idx = evenly_spaced(len(self.val_pairs), self.settings.bleu_examples)
        self.copy_val = copy_baseline(
            [self.val_pairs[i][0] for i in self.bleu_idx],
            [self.val_pairs[i][1] for i in self.bleu_idx],
        )
        self.attention_ids = self._attention_example()
        self.step = 0
        self.last: dict[str, float] = {}

    # -- training ------------------------------------------------------------------------------

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The random pairs for ``step`` (a pure function of seed and step), trailing padding cut.

        Rows are padded to seq_len; columns after the last one carrying loss change nothing under
        the causal mask, so dropping them gives the same loss and gradients for less compute.
        """
        return trim(*self.train.batch(step))

    # -- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def target_loss(self, model: torch.nn.Module) -> float:
        """Mean loss over the target tokens of every val pair (rows sorted by length, trimmed)."""
        was_training = model.training
        model.eval()
        order = sorted(range(len(self.val)), key=lambda i: sum(map(len, self.val.example(i))))
        total, count = 0.0, 0
        for start in range(0, len(order), self.batch_size):
            x, y = trim(*self.val.collate(order[start : start + self.batch_size]))
            x, y = x.to(self.device), y.to(self.device)
            with self.autocast():
                loss = model(x, y)["loss"]
            n = int((y != -100).sum())
            total, count = total + float(loss) * n, count + n
        model.train(was_training)
        return total / max(count, 1)

    def prompt(self, source: str) -> list[int]:
        """``source <sep>``, the source cut to seq_len // 2 - 1 tokens (its end dropped)."""
        ids = self.tokenizer.encode(source)[: max(1, self.seq_len // 2 - 1)]
        return [*ids, self.tokenizer.sep_id]

    def translate(
        self, model: torch.nn.Module, sources: list[str], progress: str = ""
    ) -> list[str]:
        """Translations of ``sources`` (beam search unless beam_size is 1), KV cache, batched.

        ``progress``: a label to show a bar (or, without a terminal, plain lines) under.
        """
        prompts = [self.prompt(s) for s in sources]
        cap = self.settings.max_new_tokens
        # Default cap: 2 x source + 10 tokens (fewer than 0.5% of KJV verses are longer than
        # that against their Wycliffe source), so a looping model does not run to seq_len.
        limits = [
            min(self.seq_len - len(p), 2 * len(p) + 8 if cap is None else cap) for p in prompts
        ]
        tracker = (
            TokenProgress(sum(limits), progress, len(sources), "sentence") if progress else None
        )
        with tracker or contextlib.nullcontext():
            new = generate_ids(
                model,
                prompts,
                limits,
                eos_id=self.tokenizer.eos_id,
                batch_size=self.settings.batch_size,
                device=self.device,
                autocast=self.autocast,
                beam_size=self.settings.beam_size,
                length_penalty=self.settings.length_penalty,
                on_step=tracker.update if tracker else None,
            )
        return [self.tokenizer.decode(ids) for ids in new]

    def evaluate(self, model: torch.nn.Module, step: int, writer: Any) -> dict[str, float]:
        """Target loss/ppl on val, BLEU/chrF on the fixed val subset, attention maps, samples."""
        self.step = step
        loss = self.target_loss(model)
        sources = [self.val_pairs[i][0] for i in self.bleu_idx]
        refs = [self.val_pairs[i][1] for i in self.bleu_idx]
        hyps = self.translate(model, sources)
        scores = translation_scores(hyps, refs)
        self.last = {
            "val/loss": loss,
            "val/ppl": math.exp(min(loss, 50.0)),
            "val/bleu": scores["bleu"],
            "val/chrf": scores["chrf"],
            "val/copy_bleu": self.copy_val["bleu"],
            "val/copy_chrf": self.copy_val["chrf"],
        }
        if writer is not None:
            n = self.settings.samples
            if n:
                writer.add_text(
                    "val/samples", samples_markdown(sources[:n], refs[:n], hyps[:n]), step
                )
            for i, image in enumerate(self.attention_images(model)):
                writer.add_image(f"attention/layer_{i}", image, step, dataformats="HWC")
        return self.last

    def finish(self, model: torch.nn.Module, writer: Any) -> dict[str, float]:
        """Full-test-split BLEU/chrF, final val loss, attention PNGs; the ``final/*`` metrics."""
        loss = self.target_loss(model)
        idx = evenly_spaced(len(self.test_pairs), self.settings.test_examples)
        sources = [self.test_pairs[i][0] for i in idx]
        refs = [self.test_pairs[i][1] for i in idx]
        beam = self.settings.beam_size
        log.info(
            "translating %s test verses (%s) for the final BLEU",
            f"{len(sources):,}",
            "greedy" if beam == 1 else f"beam {beam}",
        )
        started = time.perf_counter()
        hyps = self.translate(model, sources, progress="translate test")
        test = translation_scores(hyps, refs)
        log.info(
            "test BLEU %.2f  chrF %.2f  (%s verses in %.0fs)",
            test["bleu"],
            test["chrf"],
            f"{len(sources):,}",
            time.perf_counter() - started,
        )
        copy = copy_baseline(sources, refs)
        metrics = {
            "final/val_loss": loss,
            "final/val_ppl": math.exp(min(loss, 50.0)),
            "final/bleu": test["bleu"],
            "final/chrf": test["chrf"],
            "final/copy_bleu": copy["bleu"],
            "final/copy_chrf": copy["chrf"],
        }
        if "val/bleu" in self.last:
            metrics["final/val_bleu"] = self.last["val/bleu"]
            metrics["final/val_chrf"] = self.last["val/chrf"]
        if writer is not None:
            for tag, value in (
                ("test/bleu", test["bleu"]),
                ("test/chrf", test["chrf"]),
                ("test/copy_bleu", copy["bleu"]),
                ("test/copy_chrf", copy["chrf"]),
            ):
                writer.add_scalar(tag, value, self.step)
            log_dir = getattr(writer, "log_dir", None)  # a SummaryWriter's is the run dir
            if isinstance(log_dir, (str, Path)):
                write_translations(Path(log_dir) / "translations_test.tsv", sources, refs, hyps)
                self.save_attention_pngs(model, Path(log_dir) / "attention")
        return metrics

    # -- attention maps --------------------------------------------------------------------------

    def _attention_example(self) -> list[int]:
        """Input ids (``source <sep> target``, no padding) of the fixed attention-map example."""
        lo, hi = ATTENTION_TOKENS
        rows = []
        for i in range(len(self.val)):
            src, tgt = self.val.example(i)
            rows.append([*src, self.tokenizer.sep_id, *tgt])
        chosen = next((r for r in rows if lo <= len(r) <= hi), min(rows, key=len))
        return chosen[: self.seq_len]

    def token_labels(self, ids: list[int]) -> list[str]:
        """A short readable label per token (specials by name, spaces as ·)."""
        names = {
            self.tokenizer.sep_id: "<sep>",
            self.tokenizer.eos_id: "<eos>",
            self.tokenizer.pad_id: "<pad>",
            self.tokenizer.bos_id: "<bos>",
        }
        return [names.get(i) or self.tokenizer.decode([i]).replace(" ", "·") or "?" for i in ids]

    @torch.no_grad()
    def attention_weights(self, model: torch.nn.Module) -> list[np.ndarray]:
        """Per layer, the (heads, T, T) attention weights over the fixed example."""
        was_training = model.training
        model.eval()
        x = torch.tensor([self.attention_ids], dtype=torch.long, device=self.device)
        out = model(x, need_weights=True)["attention"]
        model.train(was_training)
        return [w[0].float().cpu().numpy() for w in out]

    def attention_images(self, model: torch.nn.Module) -> list[np.ndarray]:
        """One RGB (H, W, 3) uint8 image per layer, for TensorBoard."""
        labels = self.token_labels(self.attention_ids)
        return [
            figure_to_array(
                attention_figure(
                    w, labels, f"layer {i}: attention of each head (query row, key column)"
                )
            )
            for i, w in enumerate(self.attention_weights(model))
        ]

    def save_attention_pngs(self, model: torch.nn.Module, folder: Path) -> list[Path]:
        """``folder/layer<i>.png`` (160 dpi) and ``.svg`` for every layer; returns the PNG paths."""
        from posexp.store.files import save_figure_atomic

        labels = self.token_labels(self.attention_ids)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, weights in enumerate(self.attention_weights(model)):
            paths.append(folder / f"layer{i}.png")
            save_figure_atomic(
                attention_figure(
                    weights, labels, f"layer {i}: attention of each head (query row, key column)"
                ),
                paths[-1],
            )
        return paths


def samples_markdown(sources: list[str], refs: list[str], hyps: list[str]) -> str:
    """A Markdown table of source / reference / hypothesis rows."""
    lines = ["| source | reference | hypothesis |", "|---|---|---|"]
    lines += [
        f"| {_md(s)} | {_md(r)} | {_md(h)} |" for s, r, h in zip(sources, refs, hyps, strict=True)
    ]
    return "\n".join(lines)


def write_translations(path: Path, sources: list[str], refs: list[str], hyps: list[str]) -> None:
    """source / reference / hypothesis as a TSV with a header."""
    from posexp.store.files import write_text_atomic

    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["source", "reference", "hypothesis"])
    w.writerows(zip(sources, refs, hyps, strict=True))
    write_text_atomic(path, buf.getvalue())
