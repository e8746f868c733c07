"""taxcompile.fit against an AdamW + warm-up + cosine loop written out in the test, exact
resumption from its checkpoint, early stopping, and a classifier, a tagger and a decoder
that learn small tasks with it."""

import copy
import io
import math

import pytest

torch = pytest.importorskip("torch")

import taxcompile  # noqa: E402
from taxcompile import fitting_tasks as fit_tasks  # noqa: E402
from taxcompile import fit  # noqa: E402
from taxcompile.fitting import load_checkpoint  # noqa: E402
from taxcompile.fitting_parts import Progress  # noqa: E402

from conftest import SPECS  # noqa: E402


def _lin2017(double: bool = False):
    torch.manual_seed(0)
    m = taxcompile.build(SPECS / "lin2017.attn", tiny=True)
    return m.double() if double else m


def _keyword_batches(n: int, size: int = 8, seed: int = 0) -> list:
    """(inputs, label): the label is whether token 3 occurs in the sentence."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        sent = torch.randint(4, 50, (size, 10), generator=g)
        label = torch.randint(0, 2, (size,), generator=g)
        sent[label == 1, 4] = 3
        out.append(({"sent": sent}, label))
    return out


def _reference_losses(model, batches, steps, lr, wd, betas, eps, warmup, clip) -> list:
    """AdamW (decoupled decay), a linear warm-up then a cosine to 0 at the last step, and
    the gradient clipped to norm ``clip``, written out."""
    params = [p for p in model.parameters() if p.requires_grad]
    m1 = [torch.zeros_like(p) for p in params]
    m2 = [torch.zeros_like(p) for p in params]
    b1, b2 = betas
    losses = []
    model.train()
    for i in range(steps):
        x, y = batches[i % len(batches)]
        f = (i + 1) / warmup if i < warmup else \
            0.5 * (1 + math.cos(math.pi * (i - warmup) / (steps - warmup - 1)))
        rate = lr * f
        loss = model.loss(model(**x), y)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads if g is not None))
        scale = min(1.0, clip / (float(norm) + 1e-6))
        with torch.no_grad():
            for k, (p, g) in enumerate(zip(params, grads)):
                if g is None:
                    continue
                g = g * scale
                p.mul_(1 - rate * wd)
                m1[k] = b1 * m1[k] + (1 - b1) * g
                m2[k] = b2 * m2[k] + (1 - b2) * g * g
                mhat, vhat = m1[k] / (1 - b1 ** (i + 1)), m2[k] / (1 - b2 ** (i + 1))
                p -= rate * mhat / (vhat.sqrt() + eps)
        losses.append(float(loss.detach()))
    return losses


def test_fit_is_adamw_with_warmup_cosine_and_clipping():
    model = _lin2017(double=True)  # float64: the two loops agree to rounding
    ref = copy.deepcopy(model)
    batches = _keyword_batches(5)
    h = fit(model, batches, steps=24, lr=5e-3, weight_decay=0.1, betas=(0.8, 0.95),
            warmup=5, clip=0.5, threads=1, progress=False)
    want = _reference_losses(ref, batches, 24, 5e-3, 0.1, (0.8, 0.95), 1e-8, 5, 0.5)
    assert h.steps == 24 and h.stopped == "steps"
    assert h.losses == pytest.approx(want, abs=1e-6)
    assert want[-1] < want[0] - 0.5  # it learned: the comparison is not of two flat runs
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0)
    assert h.lrs[0] == pytest.approx(5e-3 / 5) and h.lrs[4] == pytest.approx(5e-3)
    assert h.lrs[-1] == pytest.approx(0.0, abs=1e-12)


def test_the_same_seed_gives_the_same_losses_and_another_seed_others():
    def run(seed):
        torch.manual_seed(0)  # the same initial weights; dropout draws from fit's seed
        m = taxcompile.build(SPECS / "vaswani2017.attn", tiny=True, p_drop=0.3)
        src = torch.randint(3, 50, (4, 6), generator=torch.Generator().manual_seed(1))
        batch = ({"src": src, "tgt": src}, src)
        return fit(m, [batch], steps=6, seed=seed, threads=1, progress=False).losses

    a, b, c = run(0), run(0), run(1)
    assert a == b
    assert a != c


class _Stop(Exception):
    pass


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    """Killed at step 17 with its last checkpoint at step 15, the run resumes from it into a
    freshly built model and gives the losses and weights of a run never stopped, bit for
    bit (dropout on: the random number generators are part of the checkpoint)."""
    def model(seed):
        torch.manual_seed(seed)
        return taxcompile.build(SPECS / "vaswani2017.attn", tiny=True, p_drop=0.2)

    def data(step):
        if step == stop_at[0]:
            raise _Stop
        g = torch.Generator().manual_seed(step)
        src = torch.randint(3, 50, (4, 6), generator=g)
        return {"src": src, "tgt": src}, src

    held = [({"src": torch.full((2, 6), 7), "tgt": torch.full((2, 6), 7)}, torch.full((2, 6), 7))]
    kw = dict(steps=30, lr=3e-3, threads=1, progress=False, eval_data=held, eval_every=10,
              checkpoint_every=5)
    stop_at = [-1]
    whole_model = model(0)
    whole = fit(whole_model, data, **kw)
    ckpt = tmp_path / "run.pt"
    stop_at[0] = 17
    with pytest.raises(_Stop):
        fit(model(0), data, checkpoint=ckpt, **kw)
    assert load_checkpoint(ckpt)["history"]["steps"] == 15
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]  # no temporary file left
    stop_at[0] = -1
    resumed_model = model(5)  # other weights: the checkpoint's replace them
    resumed = fit(resumed_model, data, checkpoint=ckpt, **kw)
    assert resumed.losses == whole.losses and resumed.lrs == whole.lrs
    assert resumed.evals == whole.evals and resumed.trained == 15
    for p, q in zip(whole_model.state_dict().values(), resumed_model.state_dict().values()):
        assert torch.equal(p, q)
    again = fit(model(5), data, checkpoint=ckpt, **kw)  # finished: nothing more to do
    assert again.trained == 0 and again.losses == whole.losses


def test_early_stopping_stops_after_patience_evaluations_without_improvement():
    """Held-out losses 1.0, 0.8, 0.9, 0.85, 0.79 ... at steps 5, 10, 15, …: with patience 3
    and min_delta 0.02 the best is 0.8 (step 10); 0.9, 0.85 and 0.79 (not 0.02 lower) make
    three evaluations without improvement: it stops at step 25."""
    scripted = iter([1.0, 0.8, 0.9, 0.85, 0.79, 0.5, 0.4])
    model = _lin2017()

    def loss(out, target):
        if torch.is_grad_enabled():
            return model.loss(out, target)
        return torch.tensor(next(scripted))

    batches = _keyword_batches(3)
    h = fit(model, batches, steps=100, eval_data=batches[:1], eval_every=5, patience=3,
            min_delta=0.02, loss=loss, threads=1, progress=False)
    assert h.stopped == "early stopping" and h.steps == 25 and len(h.losses) == 25
    assert [e["loss"] for e in h.evals] == pytest.approx([1.0, 0.8, 0.9, 0.85, 0.79])
    assert h.best["step"] == 25  # the lowest held-out loss, however small its gain


def test_a_classifier_learns_the_keyword_task():
    """lin2017's self-attentive classifier (with its attention penalty in the loss) on the
    report's keyword task (train.Task), through its own loss()."""
    mod, cm, source = fit_tasks.load(SPECS / "lin2017.attn")
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    task = fit_tasks.synthetic(m, mod, cm, source, batch=32)
    assert task.task == "keyword" and task.loss is None  # the model's own loss
    h = fit(m, task.data, steps=100, lr=3e-3, eval_data=task.eval_data, threads=1,
            progress=False)
    assert h.evals[-1]["accuracy"] >= 0.95


def test_a_crf_tagger_learns_the_keyword_task():
    """winata2019's tagger: every position tags which keyword the sentence holds; its loss
    is the CRF's negative log-likelihood, its accuracy the Viterbi path's."""
    mod, cm, source = fit_tasks.load(SPECS / "winata2019.attn")
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    task = fit_tasks.synthetic(m, mod, cm, source, batch=16)
    assert task.loss is None
    h = fit(m, task.data, steps=40, lr=1e-2, eval_data=task.eval_data, threads=1,
            progress=False)
    assert h.evals[-1]["accuracy"] >= 0.95


def test_a_decoder_learns_to_copy_with_teacher_forcing():
    """The Transformer copies its source: the target sequence is [bos, source], fed to the
    decoder and, shifted by its loss, predicted one token ahead."""
    torch.manual_seed(0)
    m = taxcompile.build(SPECS / "vaswani2017.attn", tiny=True, d_model=32, d_ff=64,
                         p_drop=0.0, vocab=16)

    def batch(step, n=32):
        src = torch.randint(3, 16, (n, 6), generator=torch.Generator().manual_seed(step))
        tgt = torch.cat([torch.ones(n, 1, dtype=torch.long), src], 1)
        return {"src": src, "tgt": tgt}, tgt

    held = [batch(10 ** 6, 128)]
    h = fit(m, batch, steps=160, lr=5e-3, warmup=0.1, eval_data=held, threads=1,
            progress=False)
    assert h.evals[-1]["accuracy"] >= 0.95
    with torch.no_grad():  # and it decodes: generate() copies a held-out source
        got = m.generate(held[0][0]["src"][:8], max_len=6, bos=1, eos=2)
    assert (got == held[0][0]["src"][:8]).float().mean() >= 0.9


def test_a_batch_that_is_not_one_is_a_clear_error():
    model = _lin2017()
    (x, y), = _keyword_batches(1)
    with pytest.raises(TypeError, match=r"batch 0: a dict; a batch is \(inputs, target\)"):
        fit(model, [{**x, "target": y}], steps=1, threads=1)
    with pytest.raises(ValueError, match="data has no length: give steps="):
        fit(model, iter([(x, y)]), threads=1)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_progress_bar_shows_loss_and_throughput_on_a_terminal_only():
    from taxcompile.fitting import History

    h = History(losses=[0.5, 0.25], steps=2, seconds=0.5, examples=64, trained=2)
    term = _Terminal()
    bar = Progress(4, stream=term)
    bar.update(h, {"loss": 0.3, "accuracy": 0.75, "step": 2})
    bar.close()
    text = term.getvalue()
    assert text.startswith("\rstep 2/4 ") and "loss 0.2500" in text
    assert "held-out 0.3000 acc 0.750" in text and "4.0 steps/s 128 ex/s" in text
    plain = io.StringIO()
    bar = Progress(4, stream=plain)
    bar.update(h)
    bar.close()
    assert plain.getvalue() == ""


def test_a_resumed_run_keeps_its_thread_count_unless_one_is_asked_for(tmp_path, monkeypatch):
    """Sums split across threads round differently: a run resumes on the threads it ran
    on, not on what the load leaves free now."""
    from taxcompile import threads

    for name in threads.ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads, "load", lambda: 0.0)
    batches = _keyword_batches(2)
    ckpt = tmp_path / "c.pt"
    assert fit(_lin2017(), batches, steps=2, checkpoint=ckpt, threads=1).threads == 1
    assert fit(_lin2017(), batches, steps=3, checkpoint=ckpt).threads == 1
    assert fit(_lin2017(), batches, steps=4, checkpoint=ckpt, threads=2).threads == 2
    assert fit(_lin2017(), batches, steps=2).threads == 2  # a fresh run: the free cores


def test_a_model_without_a_loss_needs_one():
    torch.manual_seed(0)
    m = taxcompile.build(SPECS / "zhang2019.attn", tiny=True)
    assert not hasattr(m, "loss")
    with pytest.raises(ValueError, match=r"Model has no loss\(\) \(no output is a classify\); "
                       r"give fit a loss="):
        fit(m, [({}, None)], steps=1)


def _every_model():
    from taxcompile import api

    return [(p.name, cm.model.name) for p in sorted(SPECS.glob("*.attn"))
            for cm in api.load(p)[0].models]


@pytest.mark.parametrize("spec, name", _every_model())
def test_every_model_trains_on_its_task_and_resumes_exactly(spec, name, tmp_path):
    """Each model of specs/ on its synthetic task (classifiers, taggers, decoders with
    teacher forcing, pointers, segmentation, hard attention's sampled positions, penalties):
    training moves the weights, and a 4-step run stopped after step 2 and resumed from its
    checkpoint gives the losses of one never stopped, bit for bit."""
    import warnings

    mod, cm, source = fit_tasks.load(SPECS / spec, name)

    def run(ckpt=None, stop_at=-1):
        torch.manual_seed(0)
        m = mod.Model(mod.Config.tiny())
        task = fit_tasks.synthetic(m, mod, cm, source, batch=4)

        def data(step):
            if step == stop_at:
                raise _Stop
            return task.data(step)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = fit(m, data, steps=4, loss=task.loss, metric=task.metric,
                    eval_data=task.eval_data[:1], checkpoint=ckpt, checkpoint_every=1,
                    threads=1, lr=1e-2)
        return h, m

    whole, m = run()
    torch.manual_seed(0)
    untrained = mod.Model(mod.Config.tiny())
    assert all(math.isfinite(x) for x in whole.losses) and len(whole.losses) == 4
    assert any(not torch.equal(p, q) for p, q in zip(m.parameters(), untrained.parameters()))
    ckpt = tmp_path / "c.pt"
    with pytest.raises(_Stop):
        run(ckpt, stop_at=2)
    resumed, again = run(ckpt)
    assert resumed.trained == 2 and resumed.losses == whole.losses
    for p, q in zip(m.state_dict().values(), again.state_dict().values()):
        assert torch.equal(p, q)


def test_a_loss_that_is_not_finite_stops_the_run_naming_the_step(tmp_path):
    model = _lin2017()
    steps = []

    def loss(out, target):
        steps.append(1)
        value = model.loss(out, target)
        return value * float("nan") if len(steps) == 3 else value

    ckpt = tmp_path / "c.pt"
    with pytest.raises(ValueError, match=r"step 3: the loss is nan; a lower lr or a clip"):
        fit(model, _keyword_batches(4), steps=10, loss=loss, checkpoint=ckpt,
            checkpoint_every=1, threads=1)
    assert load_checkpoint(ckpt)["history"]["steps"] == 2
