"""A `Table` as Markdown, LaTeX (booktabs) or CSV text."""

from __future__ import annotations

from maxnorm_jax.analysis.tables import Table

FORMATS = ("md", "latex", "csv")
_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$"}
_LATEX_SYMBOLS = {"±": r"$\pm$", "Δ": r"$\Delta$", "−": "$-$", "–": "--"}


def markdown(t: Table) -> str:
  lines = [f"**{t.title}**", "", "| " + " | ".join(t.header) + " |", "|" + "|".join("---" for _ in t.header) + "|"]
  lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in t.rows]
  lines += [""] + [f"_{n}_" for n in t.notes]
  return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
  out = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)
  for sym, rep in _LATEX_SYMBOLS.items():
    out = out.replace(sym, rep)
  return out


def latex(t: Table) -> str:
  lines = [f"% {t.title}", r"\begin{tabular}{" + "l" * len(t.header) + "}", r"\toprule"]
  lines.append(" & ".join(latex_escape(h) for h in t.header) + r" \\")
  lines.append(r"\midrule")
  lines += [" & ".join(latex_escape(c) for c in row) + r" \\" for row in t.rows]
  lines += [r"\bottomrule", r"\end{tabular}"] + [f"% {n}" for n in t.notes]
  return "\n".join(lines) + "\n"


def csv(t: Table) -> str:
  return t.frame.drop(columns=[c for c in ("workdir",) if c in t.frame], errors="ignore").to_csv(index=False)


def render(t: Table, fmt: str) -> str:
  if fmt == "md":
    return markdown(t)
  if fmt == "latex":
    return latex(t)
  if fmt == "csv":
    return csv(t)
  raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
