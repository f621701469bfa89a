"""Source rewrites that let cel-expr-python 0.1.3 evaluate Kubernetes DRA selectors exactly.

Applied to a selector before it is compiled (`cel.DraCel.compile`):

- `fold_literals`: `quantity("40Gi")`, `semver("1.2.3")`, `isQuantity(..)`, `isSemver(..)` on
  literals become their encoded constants (no Python call per evaluation; cel-expr-python
  0.1.3 leaks every argument passed to a Python function);
- `rewrite_comparisons`: `a.compareTo(b)`, `isGreaterThan`, `isLessThan` on two encoded values
  become native string comparisons (the encodings are order-preserving), guarded so anything
  else still reaches the Python implementation and its Kubernetes errors;
- `rewrite_domain_lookups`: `device.attributes[d]` becomes `device.attributes[?d].orValue({})`:
  a missing domain is an empty map, while `"d" in device.attributes` stays false, exactly as
  in Kubernetes.

The scanner skips string literals and `//` comments, and leaves an expression it does not
understand unchanged.
"""

from __future__ import annotations

import re

from gangsched.engine.dra import celfunctions as k

# --- missing domain -> empty map, exactly: device.attributes[X] -> device.attributes[?X].orValue({})
_HEAD = re.compile(r"\bdevice\s*\.\s*(attributes|capacity)\s*\[(?!\s*\?)")


def _skip_string(src: str, i: int) -> int:
    """i at a quote (optionally after r/b prefixes); returns the index after the literal."""
    q = src[i]
    triple = src.startswith(q * 3, i)
    raw = i > 0 and src[i - 1] in "rR"
    end = q * 3 if triple else q
    j = i + len(end)
    while j < len(src):
        if not raw and src[j] == "\\":
            j += 2
            continue
        if src.startswith(end, j):
            return j + len(end)
        j += 1
    return j


def rewrite_domain_lookups(src: str) -> str:
    out, pos = [], 0
    i = 0
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = _skip_string(src, i)
            continue
        if src.startswith("//", i):
            nl = src.find("\n", i)
            i = len(src) if nl < 0 else nl
            continue
        m = _HEAD.match(src, i)
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] in "_.")):
            j, depth = m.end(), 1  # find the matching ']'
            while j < len(src) and depth:
                if src[j] in "\"'":
                    j = _skip_string(src, j)
                    continue
                depth += {"[": 1, "]": -1}.get(src[j], 0)
                j += 1
            if depth == 0:
                inner = rewrite_domain_lookups(src[m.end() : j - 1])
                out.append(src[pos:i])
                out.append(src[i : m.end()] + "?" + inner + "].orValue({})")
                pos = i = j
                continue
        i += 1
    out.append(src[pos:])
    return "".join(out)


# --- constant folding: quantity("40Gi") -> "\ue000q:42949672960" etc., so literals cost no Python call
_FOLD = re.compile(
    r'(?<![\w.])(quantity|isQuantity|semver|isSemver)\s*\(\s*"([^"\\]*)"\s*'
    r"(?:,\s*(true|false)\s*)?\)"
)


def _cel_str(v: str) -> str:
    return '"' + v.replace("\ue000", "\\ue000") + '"'


def _fold_one(m: re.Match[str]) -> str:
    fn, lit, flag = m.group(1), m.group(2), m.group(3)
    try:
        if fn == "quantity" and flag is None:
            return _cel_str(k.q_encode(lit))
        if fn == "isQuantity" and flag is None:
            return "true" if k.is_quantity(lit) else "false"
        if fn == "semver":
            return _cel_str(k.s_encode(lit, flag == "true"))
        if fn == "isSemver":
            return "true" if k.is_semver(lit, flag == "true") else "false"
    except k.CelFunctionError:
        pass  # leave it: the call fails at run time, as in Kubernetes
    return str(m.group(0))


def fold_literals(src: str) -> str:
    out, pos, i = [], 0, 0
    while i < len(src):  # only outside string literals and comments
        c = src[i]
        if c in "\"'":
            i = _skip_string(src, i)
            continue
        if src.startswith("//", i):
            nl = src.find("\n", i)
            i = len(src) if nl < 0 else nl
            continue
        m = _FOLD.match(src, i)
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] in "_.")):
            out.append(src[pos:i])
            out.append(_fold_one(m))
            pos = i = m.end()
            continue
        i += 1
    out.append(src[pos:])
    return "".join(out)


# --- native comparisons: R.compareTo(A) / isGreaterThan / isLessThan on two order-preserving encoded values
# become plain string comparisons (no Python call: cel-expr-python 0.1.3 leaks ~100 B per argument per call);
# anything else still goes to the Python implementation, which raises Kubernetes' errors.
_TOKEN = re.compile(
    r"""
 (?P<ws>\s+) | (?P<comment>//[^\n]*)
|(?P<str>(?:[rR][bB]?|[bB][rR]?)?(?:'{3}(?:\\.|[^\\])*?'{3}|"{3}(?:\\.|[^\\])*?"{3}|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
|(?P<num>0[xX][0-9a-fA-F]+[uU]?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?|\.\d+(?:[eE][+-]?\d+)?)
|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
|(?P<op>\.\?|==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,()\[\]{}])
""",
    re.X,
)
# A rewritten expression longer than this is left as it is (operands are repeated).
_MAX_REWRITTEN = 20_000

_NATIVE = {
    "compareTo": "({r} > {a} ? 1 : ({r} < {a} ? -1 : 0))",
    "isGreaterThan": "{r} > {a}",
    "isLessThan": "{r} < {a}",
}
_GUARD = (
    'type({r}) == string && type({a}) == string && ({r}.startsWith("\\ue000q:") || '
    '{r}.startsWith("\\ue000s:")) && {a}.startsWith({r}.substring(0, 3))'
)


Token = tuple[str, str, int, int]  # kind, text, start, end


def _tokens(src: str) -> list[Token] | None:
    out: list[Token] = []
    i = 0
    while i < len(src):
        m = _TOKEN.match(src, i)
        if not m:
            return None  # something we do not understand: leave the expression alone
        if m.lastgroup not in ("ws", "comment"):
            out.append((str(m.lastgroup), m.group(), m.start(), m.end()))
        i = m.end()
    return out


def _match(toks: list[Token], k: int, step: int) -> int | None:
    """Index of the bracket matching toks[k] (searching in direction step), or None."""
    opening, closing = ("([{", ")]}") if step > 0 else (")]}", "([{")
    depth = 0
    while 0 <= k < len(toks):
        t = toks[k][1]
        if toks[k][0] == "op" and t in opening:
            depth += 1
        elif toks[k][0] == "op" and t in closing:
            depth -= 1
            if depth == 0:
                return k
        k += step
    return None


def _operand_end(tok: Token) -> bool:
    kind, text = tok[0], tok[1]
    return kind in ("str", "num") or (kind == "ident" and text != "in") or text in (")", "]", "}")


def _receiver_start(toks: list[Token], k: int) -> int | None:
    """Index of the first token of the postfix chain (a.b[c].d(e)...) ending at token k, or None."""
    while True:
        kind, text = toks[k][0], toks[k][1]
        if kind == "op" and text in ("]", ")", "}"):
            o = _match(toks, k, -1)
            if o is None:
                return None
            if text != "}" and o > 0 and _operand_end(toks[o - 1]):
                if text == ")" and toks[o - 1][0] != "ident":
                    return None
                k = o - 1  # an index or a call applied to what precedes it
                continue
            return o  # a list / map literal or a parenthesised expression
        if kind == "ident" and text != "in":
            if k > 1 and toks[k - 1][1] in (".", ".?"):
                k -= 2
                continue
            return k
        if kind in ("str", "num"):
            return k
        return None


def rewrite_comparisons(src: str) -> str:
    for _ in range(64):
        toks = _tokens(src)
        if toks is None:
            return src
        for j in range(1, len(toks) - 2):
            if not (toks[j][1] == "." and toks[j + 1][1] in _NATIVE and toks[j + 2][1] == "("):
                continue
            close = _match(toks, j + 2, 1)
            start = _receiver_start(toks, j - 1)
            if close is None or start is None or close == j + 3:
                continue
            depth, single = 0, True  # exactly one argument
            for t in toks[j + 3 : close]:
                if t[0] == "op":
                    depth += t[1] in "([{"
                    depth -= t[1] in ")]}"
                    single &= not (depth == 0 and t[1] == ",")
            if not single:
                continue
            method = toks[j + 1][1]
            # Operands are repeated, not cel.bind-ed: cel-expr-python 0.1.3 reads a stale
            # cel.bind value after an exists()/all() that stopped early in the same expression.
            # CEL has no side effects, so evaluating an operand twice only costs time.
            r = f"({src[toks[start][2] : toks[j - 1][3]]})"
            a = f"({src[toks[j + 3][2] : toks[close - 1][3]]})"
            native, guard = _NATIVE[method].format(r=r, a=a), _GUARD.format(r=r, a=a)
            # The fallback calls the library under an alias, which this loop does not rewrite again.
            new = f"(({guard}) ? ({native}) : {r}.__k8s_{method}{a})"
            if len(src) + len(new) > _MAX_REWRITTEN:
                return src  # nested comparisons: the library functions answer the rest
            src = src[: toks[start][2]] + new + src[toks[close][3] :]
            break
        else:
            return src
    return src
