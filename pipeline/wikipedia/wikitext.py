"""Wikitext to plain text.

Two cleaners with one contract, ``clean(text, site) -> Cleaned``:

- :func:`clean_fast` (default): a linear pass of compiled regular expressions in the
  manner of wikiextractor and gensim's ``filter_wiki``, with innermost-first removal of
  nested templates and links so that image captions holding links disappear whole.
- :func:`clean_mwparserfromhell`: the same policy on mwparserfromhell's parse tree.

Policy (both): drop templates, template parameters, tables, comments, ``<ref>`` and the
other non-prose extension tags (math, gallery, timeline, ...), files/images (with their
captions), categories and interlanguage links; keep the anchor text of wiki links and
external links, headings' text and list items; decode HTML entities; collapse white
space. Interlanguage links are returned (``Cleaned.langlinks``) for old dumps whose
concepts come from them. ``Cleaned.broken`` names unbalanced markup that was repaired
best-effort. ``bench/bench_wikipedia.py`` measures both cleaners against gensim's and
wikiextractor's on the same pages.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

# Wikipedia language editions (interlanguage link prefixes), 2024.
_CODES = """
    aa ab ace ady af ak als alt am ami an ang anp ar arc ary arz as ast atj av avk awa ay az
    azb ba ban bar bat-smg bbc bcl be be-tarask be-x-old bg bh bi bjn blk bm bn bo bpy br bs
    bug bxr ca cbk-zam cdo ce ceb ch cho chr chy ckb co cr crh cs csb cu cv cy da dag de din
    diq dsb dty dv dz ee el eml en eo es et eu ext fa fat ff fi fiu-vro fj fo fon fr frp frr
    fur fy ga gag gan gcr gd gl glk gn gom gor got gpe gu guc gur guw gv ha hak haw he hi hif
    ho hr hsb ht hu hy hyw hz ia id ie ig ii ik ilo inh io is it iu ja jam jbo jv ka kaa kab
    kbd kbp kcg kg ki kj kk kl km kn ko koi kr krc ks ksh ku kv kw ky la lad lb lbe lez lfn
    lg li lij lld lmo ln lo lrc lt ltg lv lzh mad mai map-bms mdf mg mh mhr mi min mk ml mn
    mni mnw mo mr mrj ms mt mus mwl my myv mzn na nah nap nds nds-nl ne new ng nia nl nn no
    nostalgia nov nqo nr nrm nso nv ny oc olo om or os pa pag pam pap pcd pcm pdc pfl pi pih
    pl pms pnb pnt ps pt pwn qu rm rmy rn ro roa-rup roa-tara ru rue rw sa sah sat sc scn sco
    sd se sg sh shi shn si simple sk skr sl sm smn sn so sq sr srn ss st stq su sv sw szl
    szy ta tay tcy te tet tg th ti tk tl tly tn to tpi tr trv ts tt tum tw ty tyv udm ug uk
    ur uz ve vec vep vi vls vo wa war wo wuu xal xh xmf yi yo yue za zea zgh zh zh-classical
    zh-min-nan zh-yue zu
    """
LANGUAGE_CODES = frozenset(_CODES.split())

# Namespace names for files and categories in every wiki, besides the local ones.
_FILE_NAMES = ("file", "image", "media")
_CATEGORY_NAMES = ("category",)
# Extension tags whose content is not prose: dropped with their content.
DROP_TAGS = (
    "ref",
    "references",
    "gallery",
    "math",
    "chem",
    "ce",
    "score",
    "timeline",
    "imagemap",
    "syntaxhighlight",
    "source",
    "pre",
    "graph",
    "mapframe",
    "maplink",
    "templatedata",
    "templatestyles",
    "hiero",
    "inputbox",
    "categorytree",
    "includeonly",
    "section",
    "indicator",
)


@dataclass(frozen=True)
class SiteNames:
    """Per-wiki names the cleaner needs (local namespace names from ``<siteinfo>``)."""

    file_prefixes: frozenset[str] = frozenset(_FILE_NAMES)
    category_prefixes: frozenset[str] = frozenset(_CATEGORY_NAMES)

    @classmethod
    def from_namespaces(cls, namespaces: dict[int, str]) -> SiteNames:
        files = set(_FILE_NAMES)
        cats = set(_CATEGORY_NAMES)
        for key, name in namespaces.items():
            if key in (6, -2) and name:
                files.add(name.lower())
            elif key == 14 and name:
                cats.add(name.lower())
        return cls(frozenset(files), frozenset(cats))


@dataclass
class Cleaned:
    text: str
    langlinks: list[tuple[str, str]] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)


def _link_kind(target: str, site: SiteNames) -> str:
    """``file``, ``category``, ``lang`` or ``link`` for a wiki link target."""
    if target.startswith(":"):
        return "link"
    prefix, sep, _ = target.partition(":")
    if not sep:
        return "link"
    p = prefix.strip().lower().replace("_", " ")
    if p in site.file_prefixes:
        return "file"
    if p in site.category_prefixes:
        return "category"
    if p in LANGUAGE_CODES:
        return "lang"
    return "link"


def _disambiguation_re(names: list[str]) -> re.Pattern[str]:
    alts = "|".join(re.escape(n.strip().replace("_", " ")).replace(r"\ ", "[ _]+") for n in names)
    return re.compile(r"\{\{\s*(?:template\s*:\s*)?(?:" + alts + r")\s*[|}]|__DISAMBIG__", re.I)


class DisambiguationDetector:
    """True for wikitext carrying one of the given templates or ``__DISAMBIG__``."""

    def __init__(self, template_names: list[str]) -> None:
        self.template_names = list(template_names)
        self._re = _disambiguation_re(self.template_names) if template_names else None

    def __call__(self, wikitext: str) -> bool:
        if self._re is None:
            return "__DISAMBIG__" in wikitext
        return self._re.search(wikitext) is not None

    def __getstate__(self):  # ship the names, recompile on the executor
        return {"template_names": self.template_names}

    def __setstate__(self, state):
        self.__init__(state["template_names"])


# --------------------------------------------------------------------------- fast cleaner

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_DROP_PAIRED = re.compile(r"<(" + "|".join(DROP_TAGS) + r")\b[^>]*?(?<!/)>.*?</\1\s*>", re.S | re.I)
_DROP_SELF = re.compile(r"<(?:" + "|".join(DROP_TAGS) + r")\b[^>]*/\s*>", re.I)
_DROP_OPEN = re.compile(r"<(" + "|".join(DROP_TAGS) + r")\b[^>]*>", re.I)
_NOWIKI = re.compile(r"<nowiki\s*/?>|</nowiki\s*>", re.I)
_BR = re.compile(r"<br\s*/?>|</?p\b[^>]*>", re.I)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_TEMPLATE = re.compile(r"\{\{\{[^{}]*\}\}\}|\{\{[^{}]*(?:(?:\{(?!\{)|\}(?!\}))[^{}]*)*\}\}")
_TABLE_TOKEN = re.compile(r"^[ \t:]*\{\||^[ \t]*\|\}", re.M)
_LINK = re.compile(r"\[\[([^\[\]]*(?:(?:\[(?!\[)|\](?!\]))[^\[\]]*)*)\]\]")
_EXTLINK = re.compile(r"\[(?:https?:|ftp:|mailto:|//)[^\s\[\]<>]*(?:[ \t]+([^\]\n]*))?\]", re.I)
_BARE_URL = re.compile(r"\bhttps?://\S+")
_QUOTES = re.compile(r"'{2,}")
_HEADING = re.compile(r"^(=+)[ \t]*(.*?)[ \t]*\1[ \t]*$", re.M)
_LIST = re.compile(r"^[*#:;]+[ \t]*", re.M)
_HR = re.compile(r"^-{4,}", re.M)
_SWITCH = re.compile(r"__[A-Z]+__")
_STRAY = re.compile(r"\{\{|\}\}|\[\[|\]\]|^[ \t]*\{\||^[ \t]*\|\}|^[ \t]*\|-.*$", re.M)
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u202f\u205f\u3000]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*(?:\n\s*)+")
_EMPTY_PARENS = re.compile(r"\((?:\s*[,;:]?\s*)\)")
_SPACE_PUNCT = re.compile(r" +([,.;:!?)\]])")


def _drop_tables(text: str) -> tuple[str, bool]:
    """Remove ``{| ... |}`` tables (nested ones too) with one stack scan; flag imbalance."""
    out, depth, last, start, broken = [], 0, 0, 0, False
    for m in _TABLE_TOKEN.finditer(text):
        if m.group().lstrip(" \t:").startswith("{|"):
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                out.append(text[last:start])
                last = m.end()
        else:
            broken = True
    if depth:
        # Unclosed table: drop it to the end of its paragraph.
        end = text.find("\n\n", start)
        out.append(text[last:start])
        last = len(text) if end < 0 else end
        broken = True
    out.append(text[last:])
    return "".join(out), broken


def _iterate(pattern: re.Pattern[str], repl, text: str, limit: int = 30) -> str:
    for _ in range(limit):
        text, n = pattern.subn(repl, text)
        if not n:
            break
    return text


def clean_fast(text: str, site: SiteNames = SiteNames()) -> Cleaned:
    """Clean wikitext with compiled regular expressions (see module docstring)."""
    broken: list[str] = []
    langlinks: list[tuple[str, str]] = []
    t = _COMMENT.sub("", text)
    t = _DROP_PAIRED.sub("", t)
    t = _DROP_SELF.sub("", t)
    if _DROP_OPEN.search(t):
        broken.append("unclosed <" + _DROP_OPEN.search(t).group(1).lower() + ">")
        # An unclosed <ref> swallows to the end of its line, as MediaWiki shows it raw.
        t = re.sub(r"<(?:" + "|".join(DROP_TAGS) + r")\b[^>]*>[^\n]*", "", t, flags=re.I)
    t = _NOWIKI.sub("", t)
    t = _iterate(_TEMPLATE, "", t)
    t, table_broken = _drop_tables(t)
    if table_broken:
        broken.append("unbalanced table")
    t = _BR.sub("\n", t)
    t = _TAG.sub("", t)
    t = _EXTLINK.sub(lambda m: m.group(1) or "", t)

    def link(m: re.Match[str]) -> str:
        inner = m.group(1)
        target, bar, anchor = inner.partition("|")
        kind = _link_kind(target, site)
        if kind == "lang":
            lang, _, title = target.partition(":")
            langlinks.append((lang.strip().lower(), title.strip()))
            return ""
        if kind != "link":
            return ""
        if bar and anchor.strip():
            return anchor
        target = target.lstrip(":").split("#", 1)[0] or target.lstrip(":#")
        return target

    t = _iterate(_LINK, link, t)
    if "{{" in t or "}}" in t:
        broken.append("unbalanced template braces")
    if "[[" in t or "]]" in t:
        broken.append("unbalanced link brackets")
    t = _STRAY.sub("", t)
    t = _BARE_URL.sub("", t)
    t = _QUOTES.sub("", t)
    t = _HEADING.sub(lambda m: m.group(2), t)
    t = _LIST.sub("", t)
    t = _HR.sub("", t)
    t = _SWITCH.sub("", t)
    t = html.unescape(t)
    t = _finish(t)
    return Cleaned(t, langlinks, broken)


def _finish(t: str) -> str:
    t = _SPACES.sub(" ", t)
    t = _EMPTY_PARENS.sub("", t)
    t = _SPACE_PUNCT.sub(r"\1", t)
    lines = [line.strip() for line in t.split("\n")]
    t = "\n".join(line for line in lines if not _is_noise(line))
    t = _BLANK_LINES.sub("\n\n", t)
    return t.strip()


def _is_noise(line: str) -> bool:
    """A line left with punctuation only (table and template debris)."""
    return bool(line) and not any(c.isalnum() for c in line)


# --------------------------------------------------------------------------- mwparserfromhell


def clean_mwparserfromhell(text: str, site: SiteNames = SiteNames()) -> Cleaned:
    """Clean wikitext by walking mwparserfromhell's parse tree (same policy)."""
    import mwparserfromhell
    from mwparserfromhell import nodes

    langlinks: list[tuple[str, str]] = []
    out: list[str] = []
    drop = set(DROP_TAGS)

    def walk(code) -> None:
        for node in code.nodes:
            if isinstance(node, nodes.Text):
                out.append(node.value)
            elif isinstance(node, nodes.Wikilink):
                target = str(node.title)
                kind = _link_kind(target, site)
                if kind == "lang":
                    lang, _, title = target.partition(":")
                    langlinks.append((lang.strip().lower(), title.strip()))
                elif kind == "link":
                    if node.text is not None and str(node.text).strip():
                        walk(node.text)
                    else:
                        out.append(target.lstrip(":").split("#", 1)[0])
            elif isinstance(node, nodes.ExternalLink):
                if node.title is not None:
                    walk(node.title)
            elif isinstance(node, nodes.Tag):
                tag = str(node.tag).lower().strip()
                if tag in drop or node.wiki_markup == "{|" or tag == "table":
                    continue
                if tag in ("br", "p"):
                    out.append("\n")
                elif node.contents is not None and not node.self_closing:
                    walk(node.contents)
                    if tag in ("li", "dd", "dt", "div", "tr"):
                        out.append("\n")
            elif isinstance(node, nodes.Heading):
                out.append("\n")
                walk(node.title)
                out.append("\n")
            elif isinstance(node, nodes.HTMLEntity):
                out.append(node.normalize())
            # Template, Argument, Comment: dropped.

    walk(mwparserfromhell.parse(text, skip_style_tags=False))
    t = "".join(out)
    t = _SWITCH.sub("", t)
    broken = []
    if "{{" in t or "}}" in t or "[[" in t or "]]" in t:
        broken.append("unbalanced markup")
        t = _STRAY.sub("", t)
    # mwparserfromhell leaves tags it cannot parse as text (an unterminated attribute,
    # a <ref> inside some constructs): apply the regex fallbacks for those.
    t = _DROP_PAIRED.sub("", t)
    t = _TAG.sub("", t)
    t = _LIST.sub("", t)
    t = _QUOTES.sub("", t)
    t = html.unescape(t)
    return Cleaned(_finish(t), langlinks, broken)


CLEANERS: dict[str, Callable[[str, SiteNames], Cleaned]] = {
    "fast": clean_fast,
    "mwparserfromhell": clean_mwparserfromhell,
}


def get_cleaner(name: str) -> Callable[[str, SiteNames], Cleaned]:
    return CLEANERS[name]
