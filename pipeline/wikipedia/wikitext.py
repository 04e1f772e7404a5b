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
best-effort. Both cleaners are compared with gensim's and wikiextractor's on the same
pages in (bench/README.md, "Wikipedia ingestion").
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.text.languages import canonical_lang
from pipeline.wikipedia import wikis

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
    """Per-wiki namespace names the cleaner needs (normalised, see :func:`wikis.normalize_name`).

    File links are recognised by MediaWiki's canonical names (``File``, ``Image``,
    ``Media``), the local names of the dump's ``<siteinfo>``, the localised aliases
    MediaWiki defines for the wiki's language (shipped data, :mod:`wikis`; aliases never
    appear in ``<siteinfo>``) and any extra names configured; and, for a prefix that is
    none of these nor a language code, by a target ending in a media file extension.
    """

    file_prefixes: frozenset[str] = wikis.file_namespace_names(None)
    category_prefixes: frozenset[str] = wikis.category_namespace_names(None)

    @classmethod
    def from_namespaces(
        cls,
        namespaces: dict[int, str],
        lang: str | None = None,
        extra_file_names: tuple[str, ...] | list[str] = (),
    ) -> SiteNames:
        files = set(wikis.file_namespace_names(lang))
        cats = set(wikis.category_namespace_names(lang))
        files.update(wikis.normalize_name(n) for n in extra_file_names)
        for key, name in namespaces.items():
            if key in (6, -2) and name:
                files.add(wikis.normalize_name(name))
            elif key == 14 and name:
                cats.add(wikis.normalize_name(name))
        return cls(frozenset(files), frozenset(cats))


@dataclass
class Cleaned:
    text: str
    langlinks: list[tuple[str, str]] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)


def _link_kind(target: str, site: SiteNames) -> str:
    """``file``, ``category``, ``lang`` or ``link`` for a wiki link target.

    A leading colon (``[[:Category:X]]``) makes any target a plain link.
    """
    if target.startswith(":"):
        return "link"
    prefix, sep, rest = target.partition(":")
    if not sep:
        return "link"
    p = wikis.normalize_name(prefix)
    if p in site.file_prefixes:
        return "file"
    if p in site.category_prefixes:
        return "category"
    if p in LANGUAGE_CODES:
        return "lang"
    if _has_media_extension(rest):
        return "file"
    return "link"


def _has_media_extension(name: str) -> bool:
    stem, dot, ext = name.strip().rpartition(".")
    return bool(dot and stem) and ext.lower() in wikis.MEDIA_EXTENSIONS


def _displayed_title(target: str, site: SiteNames) -> str:
    """What MediaWiki shows for a link without anchor text: the target, but for a colon
    link into the File/Media/Category namespace or another language (``[[:Category:X]]``,
    ``[[:fr:X]]``) the page name without that prefix, as a reader reads it."""
    t = target.lstrip(":").split("#", 1)[0] or target.lstrip(":#")
    if target.startswith(":"):
        prefix, sep, rest = t.partition(":")
        p = wikis.normalize_name(prefix)
        if (
            sep
            and rest.strip()
            and (p in site.file_prefixes or p in site.category_prefixes or p in LANGUAGE_CODES)
        ):
            return rest.strip()
    return t


def _pipe_trick(target: str) -> str:
    """``[[Namespace:Title (x)|]]`` shows ``Title`` (MediaWiki's pipe trick)."""
    t = target.lstrip(":").split("#", 1)[0]
    t = t.partition(":")[2] or t
    t = re.sub(r"\s*\([^()]*\)\s*$", "", t)
    return t.split(",", 1)[0].strip()


def _disambiguation_re(names: list[str], prefixes: list[str]) -> re.Pattern[str]:
    def alt(n: str) -> str:
        return re.escape(" ".join(n.replace("_", " ").split())).replace(r"\ ", "[ _]+")

    alts = "|".join(alt(n) for n in names)
    pre = "|".join(alt(p) for p in prefixes)
    return re.compile(r"\{\{\s*(?:(?:" + pre + r")\s*:\s*)?(?:" + alts + r")\s*[|}]", re.I)


class DisambiguationDetector:
    """True for wikitext carrying one of the given templates or a ``__DISAMBIG__`` magic word.

    ``template_names`` compare case-insensitively (``_`` = space), with or without a
    ``Template:`` prefix (or one of ``template_prefixes``, the wiki's local names of the
    Template namespace). Magic words compare case-sensitively, as MediaWiki does.
    """

    def __init__(
        self,
        template_names: list[str],
        magic_words: list[str] | None = None,
        template_prefixes: list[str] | None = None,
    ) -> None:
        self.template_names = list(template_names)
        self.magic_words = list(
            wikis.disambiguation_magic_words() if magic_words is None else magic_words
        )
        self.template_prefixes = list(template_prefixes or wikis.CANONICAL_TEMPLATE)
        self._re = (
            _disambiguation_re(self.template_names, self.template_prefixes)
            if template_names
            else None
        )

    def has_magic_word(self, wikitext: str) -> bool:
        return any(w in wikitext for w in self.magic_words)

    def __call__(self, wikitext: str) -> bool:
        if self.has_magic_word(wikitext):
            return True
        return self._re is not None and self._re.search(wikitext) is not None

    def __getstate__(self):  # ship the names, recompile on the executor
        return {
            "template_names": self.template_names,
            "magic_words": self.magic_words,
            "template_prefixes": self.template_prefixes,
        }

    def __setstate__(self, state):
        self.__init__(state["template_names"], state["magic_words"], state["template_prefixes"])


_TEMPLATE_NAME = re.compile(r"\{\{\s*([^{}|#<>\[\]\n]+?)\s*(?:\||\}\})")
_NOINCLUDE = re.compile(r"<noinclude>.*?(?:</noinclude>|\Z)", re.S | re.I)


def template_names_used(wikitext: str, template_prefixes: frozenset[str]) -> list[str]:
    """Normalised names of the templates a page transcludes (``{{Name|...}}``), sorted.

    Parser functions and variables (``{{#if:``, ``{{PAGENAME}}``) are left out; a
    ``Template:`` prefix (canonical or local, normalised in ``template_prefixes``) is
    removed.
    """
    out = set()
    for m in _TEMPLATE_NAME.finditer(wikitext):
        name = m.group(1)
        if name.startswith(("#", "subst:", "safesubst:")) or name.isupper():
            continue
        prefix, sep, rest = name.partition(":")
        if sep:
            if wikis.normalize_name(prefix) not in template_prefixes:
                continue  # a parser function or magic word with an argument
            name = rest
        out.add(wikis.normalize_name(name))
    out.discard("")
    return sorted(out)


def transcludes_magic_word(template_wikitext: str, magic_words: list[str]) -> bool:
    """Whether a template's wikitext puts a disambiguation magic word on the pages that use
    it (text inside ``<noinclude>`` is not transcluded)."""
    text = _NOINCLUDE.sub("", template_wikitext)
    return any(w in text for w in magic_words)


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
            langlinks.append((canonical_lang(lang), title.strip()))
            return ""
        if kind != "link":
            return ""
        if bar and anchor.strip():
            return anchor
        if bar:
            return _pipe_trick(target)
        return _displayed_title(target, site)

    t = _iterate(_LINK, link, t)
    if "{{" in t or "}}" in t:
        broken.append("unbalanced template braces")
    if "[[" in t or "]]" in t:
        broken.append("unbalanced link brackets")
    t = _STRAY.sub("", t)
    t = _BARE_URL.sub("", t)
    t = _QUOTES.sub("", t)
    t = _HEADING.sub(lambda m: _heading_mark(len(m.group(1)), m.group(2)), t)
    t = _LIST.sub("", t)
    t = _HR.sub("", t)
    t = _SWITCH.sub("", t)
    t = html.unescape(t)
    t = _finish(t)
    return Cleaned(t, langlinks, broken)


# Headings are marked "\x01<level>\x02<title>" while cleaning, so that _finish can drop
# those whose section has no text left (a "References" section of templates only).
_HEADING_MARK = "\x01"


def _heading_mark(level: int, title: str) -> str:
    return f"{_HEADING_MARK}{level}\x02{title}"


def _finish(t: str) -> str:
    t = _SPACES.sub(" ", t)
    t = _EMPTY_PARENS.sub("", t)
    t = _SPACE_PUNCT.sub(r"\1", t)
    items: list[tuple[int, str]] = []  # (heading level, or 0 for text; line)
    for raw in t.split("\n"):
        line = raw.strip()
        if line.startswith(_HEADING_MARK):
            level, _, title = line[1:].partition("\x02")
            items.append((int(level), title.strip()))
        elif not _is_noise(line):
            items.append((0, line))
    t = "\n".join(_drop_empty_sections(items))
    t = _BLANK_LINES.sub("\n\n", t)
    return t.strip()


def _drop_empty_sections(items: list[tuple[int, str]]) -> list[str]:
    """Lines without the headings whose section (up to the next heading of the same or a
    higher level, subsections included) has no text, or whose own title is empty."""
    out = []
    for i, (level, line) in enumerate(items):
        if not level:
            out.append(line)
            continue
        if not any(c.isalnum() for c in line):
            continue
        for lvl, text in items[i + 1 :]:
            if lvl and lvl <= level:
                break
            if not lvl and text:
                out.append(line)
                break
    return out


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
                    langlinks.append((canonical_lang(lang), title.strip()))
                elif kind == "link":
                    if node.text is not None and str(node.text).strip():
                        walk(node.text)
                    elif node.text is not None:
                        out.append(_pipe_trick(target))
                    else:
                        out.append(_displayed_title(target, site))
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
                out.append("\n" + _heading_mark(node.level, ""))
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
