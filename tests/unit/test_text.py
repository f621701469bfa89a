"""Issue 10.7: user text in Events and conditions cannot forge lines or drive a terminal."""

from __future__ import annotations

from gangsched.binder import event_body
from gangsched.model import Reason, parse_pod_group
from gangsched.model.text import printable, quoted
from gangsched.status import Verdict, build_status
from gangsched_testing.builders import pod_group_manifest

HOSTILE = "rack\nWarning FAKE\x1b[31m \u202eevil\u2028x"


def test_printable_escapes_controls_format_and_separators() -> None:
    out = printable(HOSTILE)
    assert out == "rack\\x0aWarning FAKE\\x1b[31m \\u202eevil\\u2028x"
    assert out.isprintable()
    assert printable("plain ascii, é and 中文") == "plain ascii, é and 中文"


def test_quoted_marks_where_a_user_string_begins_and_ends() -> None:
    assert quoted('a "b"') == '"a \\"b\\""'
    assert quoted(HOSTILE).isprintable()


def test_event_and_condition_messages_are_printable() -> None:
    body = event_body(
        involved={"namespace": "ml", "name": "g", "kind": "PodGroup"},
        event_type="Warning",
        reason="Unschedulable",
        message=HOSTILE,
        instance="i",
    )
    assert body["message"].isprintable()
    group = parse_pod_group(pod_group_manifest("g", 2))
    status = build_status(
        group,
        [],
        Verdict(reason=Reason.UNSCHEDULABLE, message=HOSTILE),
        previous=None,
        now="2026-01-01T00:00:00Z",
    )
    assert status["conditions"][0]["message"].isprintable()
