"""Unit tests of the pure parts: escaping, chunking, inbound text, file names, edit pacing."""

from __future__ import annotations

import random

import pytest
from iris_slack.channel_ids import CHANNEL_ID
from iris_slack.text import (
    MIN_CHUNK_LENGTH,
    SLACK_MAX_LENGTH,
    escape,
    escaped_length,
    inbound_text,
    safe_file_name,
    split_chunks,
)

from iris_runtime.engine.channels import validate_filename
from iris_runtime.transport_kit.edit_pacing import EditPacer


def test_escaping_keeps_mentions_and_links_and_defuses_broadcasts() -> None:
    text = "hi <@UANA00001> see <#CGENERAL1> and <https://x.test/?a=1&b=2|the docs> a&b 1<2>0"
    assert escape(text) == (
        "hi <@UANA00001> see <#CGENERAL1> and <https://x.test/?a=1&amp;b=2|the docs> "
        "a&amp;b 1&lt;2&gt;0"
    )
    for broadcast in ("<!channel>", "<!here>", "<!everyone>", "<!subteam^S123>"):
        assert "<!" not in escape(f"ping {broadcast} now")
    # A markup injection attempt: a fake mention with a label, script tags, pre-escaped text.
    assert escape("<@UANA00001|boss> <script>&lt;") == (
        "&lt;@UANA00001|boss&gt; &lt;script&gt;&amp;lt;"
    )
    assert escape("<javascript:alert(1)|click>") == "&lt;javascript:alert(1)|click&gt;"


def test_chunks_fit_the_escaped_limit_and_break_on_newlines() -> None:
    lines = [f"line {i} " + "&<>" * (i % 7) + "x" * (i % 50) for i in range(3000)]
    text = "\n".join(lines)
    chunks = split_chunks(text, 1000)
    assert all(escaped_length(c) <= 1000 for c in chunks)
    assert "\n".join(chunks) == text  # cut only at newlines: nothing lost or added
    assert all(escaped_length(c) > 250 for c in chunks[:-1])  # and not wastefully small


def test_a_100_kb_reply_without_newlines_is_cut_on_spaces_then_anywhere() -> None:
    words = " ".join("word" + str(i) for i in range(20_000))
    chunks = split_chunks(words)
    assert all(escaped_length(c) <= SLACK_MAX_LENGTH for c in chunks)
    assert " ".join(chunks) == words
    blob = "y" * 100_000
    hard = split_chunks(blob, MIN_CHUNK_LENGTH)
    assert "".join(hard) == blob and {len(c) for c in hard} == {MIN_CHUNK_LENGTH}


def test_chunking_never_cuts_a_mention_and_survives_overlong_links() -> None:
    text = "b" * 995 + "<@UANA00001>" + "c" * 50
    chunks = split_chunks(text, 1000)
    assert chunks[0] == "b" * 995 and chunks[1].startswith("<@UANA00001>")
    link = "<https://x.test/" + "p" * 3000 + ">"
    assert all(escaped_length(c) <= 1000 for c in split_chunks(link, 1000))


def test_chunking_random_text_respects_the_limit() -> None:
    rng = random.Random(7)  # noqa: S311 (test data)
    alphabet = "ab &<>\n*_<@UANA00001>"
    for _ in range(50):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6000)))
        limit = rng.choice([1000, 2000, 4000])
        chunks = split_chunks(text, limit)
        assert all(escaped_length(c) <= limit and c.strip() for c in chunks)


def test_empty_and_blank_text_has_no_chunks() -> None:
    assert split_chunks("") == []
    assert split_chunks(" \n\n \n") == []


def test_inbound_text_drops_the_bot_mention_and_decodes_entities() -> None:
    assert inbound_text("<@UBOT00001> hello &lt;b&gt; &amp; <@UANA00001>", "UBOT00001") == (
        "hello <b> & <@UANA00001>"
    )
    assert inbound_text("<@UBOT00001|iris>: @helper do it", "UBOT00001") == "@helper do it"
    assert inbound_text("  <@UBOT00001>  ", "UBOT00001") == ""
    assert inbound_text("ask <@UBOT00001> later", "UBOT00001") == "ask <@UBOT00001> later"


@pytest.mark.parametrize(
    "hostile",
    [
        "../../etc/passwd",
        "..\\..\\windows\\system32",
        ".bashrc",
        "a\x00b\nc.txt",
        "..",
        "",
        "CON",
        "résumé 2024 (final).pdf",
        "x" * 500 + ".tar.gz",
        "/absolute/path.txt",
        "<script>.html",
    ],
)
def test_hostile_file_names_become_safe_bare_names(hostile: str) -> None:
    name = safe_file_name(hostile, "file0")
    assert validate_filename(name) == name
    assert "/" not in name and ".." not in name and not name.startswith(".")
    assert len(name) <= 120


def test_file_names_keep_what_is_harmless() -> None:
    assert safe_file_name("report-2024.final.pdf") == "report-2024.final.pdf"
    assert safe_file_name("résumé.pdf") == "resume.pdf"
    assert safe_file_name("x" * 500 + ".tar.gz").endswith(".gz")


def test_edit_pacer_counts_the_interval_from_the_previous_answer() -> None:
    now = [100.0]
    waited: list[float] = []

    def sleep(seconds: float) -> None:
        waited.append(seconds)
        now[0] += seconds

    pacer = EditPacer(interval=1.0, clock=lambda: now[0])
    with pacer.slot("C1", sleep):
        now[0] += 0.7  # the edit takes 0.7 s to be answered
    with pacer.slot("C1", sleep):
        pass
    assert waited == [1.0]  # a full second after the answer, not 0.3 s after the claim
    with pacer.slot("C2", sleep):
        pass
    assert waited == [1.0]  # channels are independent
    now[0] += 5
    assert pacer.wait_hint("C1") == 0.0


def test_a_link_label_with_spaces_is_never_cut() -> None:
    link = "<https://example.com/page|click here for the report>"
    for text in ("x" * 3980 + " " + link, "a" * 3990 + " see " + link + " ok"):
        chunks = split_chunks(text, 4000)
        assert any(link in chunk for chunk in chunks)
        assert all("&lt;" not in escape(chunk) for chunk in chunks)
    label = " ".join(f"w{i}" for i in range(40))
    chunks = split_chunks("x" * 3950 + " <https://example.com/r|" + label + ">", 4000)
    assert escape(chunks[-1]).startswith("<https://example.com/r|w0 w1")


def test_slack_ids_need_a_digit() -> None:
    for other in ("GENERAL", "DAILY", "CRON", "DEPLOYS", "GITHUB"):
        assert not CHANNEL_ID.fullmatch(other)
    for slack in ("C0123ABCD", "G01AB2CD3", "D0456EFGH", "CGENERAL1"):
        assert CHANNEL_ID.fullmatch(slack)
