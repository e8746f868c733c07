"""The Markdown form of gpu-report.json: the run's header, the stages with their time and
budget, then one table per stage."""

from __future__ import annotations

from ..__main__ import fmt_bytes, fmt_s


def _stage(report: dict, name: str) -> dict | None:
    return next((s for s in report["stages"] if s["stage"] == name), None)


def correctness_table(stage: dict, tolerance: dict) -> list[str]:
    tol = "; ".join(f"{m}: outputs {t['output']:g}, gradients {t['grad']:g}"
                    for m, t in tolerance.items())
    lines = [f"Relative L2 error against float64 on the CPU (tolerance {tol}).", "",
             "| model | features | float32 out / grad | bf16 autocast out / grad | tensors "
             "| generate() cached = re-run | ok |", "|---|---|---|---|---|---|---|"]
    for r in stage["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | | | | | | **error**: {r['error']} |")
            continue
        cells = []
        for mode in ("float32", "bf16-autocast"):
            m = r["modes"].get(mode, {})
            if m.get("skipped"):
                cells.append(f"skipped: {m['skipped']}")
                continue
            if "output" not in m:
                cells.append("; ".join(m.get("failed", [])))
                continue
            cells.append(f"{m['output']['worst']:.1e} / {m['grad']['worst']:.1e}" +
                         ("" if not m["failed"] else " **" + "; ".join(m["failed"][:2]) + "**"))
        f32 = r["modes"].get("float32", {})
        n = f32.get("output", {}).get("tensors", 0) + f32.get("grad", {}).get("tensors", 0)
        g = r.get("generate")
        gen = "" if g is None else ("yes" if g.get("same") else f"**no** {g.get('error', '')}")
        lines.append(f"| {r['model']} | {', '.join(r['features'])} | {cells[0]} | {cells[1]} "
                     f"| {n} | {gen} | {'yes' if r['ok'] else '**no**'} |")
    return lines


def kernels_table(stage: dict) -> list[str]:
    lines = ["| model | statement | calls | path | ok |", "|---|---|---|---|---|"]
    for r in stage["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | | | **error**: {r['error']} | no |")
        for st in r["statements"]:
            path = ", ".join(st["paths"]) + (f" ({st['flex']})" if "flex" in st else "")
            why = f" {st['why']}" if st.get("why") else ""
            lines.append(f"| {r['model']} | `{st['statement']}` | {st['calls']} | {path}{why} "
                         f"| {'yes' if st['ok'] else '**no**'} |")
    return lines


def speed_table(rows: list[dict]) -> list[str]:
    lines = ["| case | ours | peer | time ours / peer | ratio | target | met | peak ours / peer "
             "| equivalence |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        met = {True: "yes", False: "**no**", None: ""}[r.get("met")]
        ratio = "" if r.get("ratio") is None else f"{r['ratio']:.3f}"
        if r.get("skipped") and r.get("ratio") is None:
            ratio, met = f"skipped: {r['skipped']}", met or "skipped"
        times = " / ".join(x for x in (fmt_s(r.get("candidate_s")), fmt_s(r.get("baseline_s")))
                           if x)
        peaks = " / ".join(x for x in (fmt_bytes(r.get("candidate_peak_bytes")),
                                       fmt_bytes(r.get("baseline_peak_bytes"))) if x)
        extra = ""
        if r.get("candidate_tflops") is not None:
            extra = (f" ({r['candidate_tflops']:.3g} vs {r['baseline_tflops']:.3g} TFLOP/s, "
                     f"{r.get('dtype', '')})")
        lines.append(f"| `{r['case']}` | {r['candidate']} | {r['baseline']} | {times}{extra} "
                     f"| {ratio} | {r['target']} | {met} | {peaks} | {r.get('equivalence', '')} |")
    return lines


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# taxcompile GPU check: {env['device_name']}", "",
             f"{env['date']}; torch {env['torch']}, CUDA {env['cuda'] or '-'}, driver "
             f"{env['driver'] or '-'}; device `{report['device']}`"
             f"{' (small sizes)' if report['small'] else ''}; {report['seconds']:.0f} s in all; "
             f"result: **{'pass' if report['ok'] else 'FAIL'}**", "",
             "| stage | status | passed | seconds | budget |", "|---|---|---|---|---|"]
    for s in report["stages"]:
        status = s["status"] + (f": {s['error']}" if s.get("error") else "")
        lines.append(f"| {s['stage']} | {status} | {'yes' if s['ok'] else '**no**'} "
                     f"| {s['seconds']:.1f} | {s['budget_s']:g} |")
    if (st := _stage(report, "correctness")) is not None:
        lines += ["", "## Correctness", ""] + correctness_table(st, report["tolerance"])
    if (st := _stage(report, "kernels")) is not None:
        lines += ["", "## Kernels", ""] + kernels_table(st)
    if (st := _stage(report, "kernels_flex")) is not None:
        lines += ["", "## FlexAttention (torch.compile)", ""] + kernels_table(st)
    speed = [r for s in report["stages"] if s["stage"].startswith("speed") for r in s["rows"]]
    if speed:
        lines += ["", "## Speed and peak memory", ""] + speed_table(speed)
    return "\n".join(lines) + "\n"
