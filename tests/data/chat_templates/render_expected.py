#!/usr/bin/python3
"""Renders every template x conversation and every snippet with Jinja2, set up
as Hugging Face transformers sets it up for chat templates, into expected/.

  render_expected.py           writes expected/
  render_expected.py --check   exits 1 if expected/ differs from a fresh render

Each result is expected/<name>.txt (the rendering) or expected/<name>.error
(first line: "raise_exception" or "error"; then the message), so infera's
interpreter (tests/jinja/jinja_reference_test.cc) is checked against Jinja2.
"""
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent


class TemplateRaised(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class Generation(jinja2.ext.Extension):  # transformers' {% generation %} marker: renders its body
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols, jinja2.ext.do])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def chat_context(conv):
    """The variables transformers' apply_chat_template passes."""
    ctx = dict(conv)
    ctx.setdefault("tools", None)
    ctx.setdefault("documents", None)
    return ctx


def render(env, source, ctx):
    try:
        return ".txt", env.from_string(source).render(**ctx)
    except TemplateRaised as e:
        return ".error", "raise_exception\n" + str(e)
    except Exception as e:  # syntax, undefined, type errors: infera must fail too
        return ".error", "error\n" + type(e).__name__ + ": " + str(e)


def all_results():
    env = make_env()
    out = {}
    convs = json.loads((HERE / "conversations.json").read_text())
    for tpl in sorted(HERE.glob("*.jinja")):
        source = tpl.read_text()
        for conv_name, conv in convs.items():
            ext, text = render(env, source, chat_context(conv))
            out[f"{tpl.stem}__{conv_name}{ext}"] = text
    snippets = json.loads((HERE / "snippets.json").read_text())
    for name, source in snippets["snippets"].items():
        ext, text = render(env, source, snippets["context"])
        out[f"snippet__{name}{ext}"] = text
    return out


def main():
    check = "--check" in sys.argv[1:]
    exp_dir = HERE / "expected"
    results = all_results()
    if check:
        have = {p.name: p.read_text() for p in exp_dir.iterdir()} if exp_dir.exists() else {}
        stale = sorted(set(have) ^ set(results)) + sorted(k for k in results if k in have and have[k] != results[k])
        if stale:
            print("expected/ is stale (run render_expected.py):", ", ".join(stale))
            return 1
        print(f"{len(results)} renderings match Jinja2 {jinja2.__version__}")
        return 0
    exp_dir.mkdir(exist_ok=True)
    for p in exp_dir.iterdir():
        p.unlink()
    for name, text in results.items():
        (exp_dir / name).write_text(text)
    print(f"wrote {len(results)} renderings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
