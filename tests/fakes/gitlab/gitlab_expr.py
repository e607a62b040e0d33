"""GitLab's CI/CD variable expressions (`rules:if`, `only:variables`, `workflow:rules:if`), as
doc/ci/jobs/job_rules.md describes them and lib/gitlab/ci/pipeline/expression implements them:

    $VAR                     present and not empty
    $VAR == "text"  'text'   equal (an undefined variable is null; "" is not null)
    $VAR != null
    $VAR =~ /regex/i         matches (a variable holding "/regex/" may stand on the right)
    $VAR !~ /regex/
    a && b || (c && d)       && binds tighter than ||

A malformed expression raises ExpressionError; the caller turns it into GitLab's config error.
"""

import re


class ExpressionError(Exception):
    pass


# The lexemes, tried in this order at each position (as GitLab's lexer does).
_LEXEMES = [
    ("ws", re.compile(r"\s+")),
    ("var", re.compile(r"\$(\w+)")),
    ("str", re.compile(r"\"(.*?)\"|'(.*?)'")),
    ("pattern", re.compile(r"/((?:[^/]|\\/)+[^\\])/([ismU]*)")),
    ("null", re.compile(r"null\b")),
    ("bool", re.compile(r"(true|false)\b")),
    ("op", re.compile(r"==|!=|=~|!~|&&|\|\||\(|\)")),
]


def _tokens(text):
    pos, out = 0, []
    while pos < len(text):
        for kind, rx in _LEXEMES:
            m = rx.match(text, pos)
            if not m:
                continue
            pos = m.end()
            if kind == "ws":
                break
            if kind == "var":
                out.append(("var", m.group(1)))
            elif kind == "str":
                out.append(("str", m.group(1) if m.group(1) is not None else m.group(2)))
            elif kind == "pattern":
                out.append(("pattern", (m.group(1).replace("\\/", "/"), m.group(2))))
            elif kind == "null":
                out.append(("null", None))
            elif kind == "bool":
                out.append(("bool", m.group(1) == "true"))
            else:
                out.append(("op", m.group(0)))
            break
        else:
            raise ExpressionError("invalid expression syntax")
    return out


def _regex(source, flags):
    f = 0
    for c in flags:
        f |= {"i": re.IGNORECASE, "m": re.DOTALL, "s": re.DOTALL, "x": re.VERBOSE, "U": 0}.get(c, 0)
    try:
        return re.compile(source, f)
    except re.error:
        raise ExpressionError("Invalid regular expression!")


class _Parser:
    def __init__(self, tokens, variables):
        self.t = tokens
        self.i = 0
        self.v = variables

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def parse(self):
        if not self.t:
            raise ExpressionError("invalid expression syntax")
        value = self.or_expr()
        if self.i != len(self.t):
            raise ExpressionError("invalid expression syntax")
        return value

    def or_expr(self):
        left = self.and_expr()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_expr()
            left = left if _truthy(left) else right
        return left

    def and_expr(self):
        left = self.comparison()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.comparison()
            left = right if _truthy(left) else left
        return left

    def comparison(self):
        left = self.operand()
        kind, op = self.peek()
        if kind == "op" and op in ("==", "!=", "=~", "!~"):
            self.take()
            right = self.operand()
            if op in ("==", "!="):
                eq = _scalar(left) == _scalar(right)
                return eq if op == "==" else not eq
            pattern = right
            if isinstance(pattern, str):  # a variable holding "/regex/flags"
                m = re.fullmatch(r"/(.*)/([ismU]*)", pattern, re.DOTALL)
                if not m:
                    raise ExpressionError("Invalid regular expression!")
                pattern = _regex(m.group(1), m.group(2))
            if pattern is None:
                return op == "!~"
            if not hasattr(pattern, "search"):
                raise ExpressionError("invalid expression syntax")
            found = pattern.search("" if left is None else str(_scalar(left))) is not None
            return found if op == "=~" else not found
        return left

    def operand(self):
        kind, value = self.take()
        if kind == "op" and value == "(":
            inner = self.or_expr()
            if self.take() != ("op", ")"):
                raise ExpressionError("invalid expression syntax")
            return inner
        if kind == "var":
            return self.v.get(value)
        if kind in ("str", "null", "bool"):
            return value
        if kind == "pattern":
            return _regex(*value)
        raise ExpressionError("invalid expression syntax")


def _scalar(v):
    return v.pattern if hasattr(v, "pattern") else v


def _truthy(v):
    if v is None or v is False:
        return False
    if isinstance(v, str):
        return v != ""
    return True


def evaluate(expression, variables):
    """Whether `expression` holds with `variables` (a dict of name -> string)."""
    if not isinstance(expression, str):
        raise ExpressionError("invalid expression syntax")
    return _truthy(_Parser(_tokens(expression), variables).parse())
