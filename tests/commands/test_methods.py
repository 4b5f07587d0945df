"""`posexp methods`: every extension method and its settings, as text or as JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from posexp.cli import app
from posexp.extension import EXTENSIONS
from posexp.pe import PE_REGISTRY, accepted_extensions


def test_methods_json_is_one_document_of_every_method_and_its_settings():
    out = CliRunner().invoke(app, ["methods", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["methods"]
    assert [r["method"] for r in rows] == list(EXTENSIONS)
    for row in rows:
        method = EXTENSIONS[row["method"]]
        assert row["encodings"] == [
            p for p in PE_REGISTRY if row["method"] in accepted_extensions(p)
        ]
        assert row["when"] == ("eval only" if method.training_free else "train + eval")
        assert [s["name"] for s in row["settings"]] == [s.name for s in method.spec_settings]
        for setting in row["settings"]:
            default = "length/L0" if setting["name"] == "factor" else method.params[setting["name"]]
            assert setting["default"] == default and setting["allowed"]


def test_the_text_listing_says_what_the_json_says():
    text = CliRunner().invoke(app, ["methods"], env={"COLUMNS": "300"}).output  # unwrapped
    listing = json.loads(CliRunner().invoke(app, ["methods", "--json"]).output)
    # The paragraph on writing a spec was the text's alone (the JSON was the rows only).
    assert " ".join(text.split()).endswith(" ".join(listing["spec_syntax"].split()))
    assert "name(key=value,...)" in listing["spec_syntax"]
    # the grid syntax, with an example that parses to the number of specs it says
    from posexp.extension.spec import parse_specs

    assert "'self_extend(group=2|4|8,window=16|32)' is six" in " ".join(
        listing["spec_syntax"].split()
    )
    assert len(parse_specs("self_extend(group=2|4|8,window=16|32)")) == 6
    for row in listing["methods"]:
        every = len(row["encodings"]) == len(PE_REGISTRY)
        encodings = "every encoding" if every else ", ".join(row["encodings"])
        assert f"{row['method']}  ({encodings}; {row['when']})" in text
