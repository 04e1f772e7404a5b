# ruff: noqa: E501  (wikitext lines are data)
"""Write the multilingual dump samples of this folder (see PROVENANCE.md one level up).

    python tests/data/wiki/multilingual/make_samples.py

Each ``<lang>wiki-sample-pages-articles.xml`` is an export-0.10 dump of that Wikipedia in
the layout Wikimedia publishes: the wiki's real <siteinfo> namespace names (only the
current local names: MediaWiki never lists aliases there), then pages that use what a
multilingual corpus meets in that wiki: an image linked through a namespace *alias*
(Hình:, Εικόνα:, 画像:, Изображение:) with localised options and a caption holding a
link, an image behind a prefix that is no namespace at all, a references section left
empty once templates are gone, a [[:Category:...]] link in prose, disambiguation pages
marked by the wiki's own template, by a template of the dump that sets __DISAMBIG__ and
by a redirect to that template, a hatnote that must not count as disambiguation, a
redirect, and the template pages themselves.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent

HEAD = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.10/ \
http://www.mediawiki.org/xml/export-0.10.xsd" version="0.10" xml:lang="{lang}">
  <siteinfo>
    <sitename>{sitename}</sitename>
    <dbname>{lang}wiki</dbname>
    <base>https://{lang}.wikipedia.org/wiki/</base>
    <generator>MediaWiki 1.42.0-wmf.5</generator>
    <case>first-letter</case>
    <namespaces>
{namespaces}
    </namespaces>
  </siteinfo>
"""

PAGE = """  <page>
    <title>{title}</title>
    <ns>{ns}</ns>
    <id>{id}</id>{redirect}
    <revision>
      <id>{rev}</id>
      <timestamp>2024-05-01T12:00:00Z</timestamp>
      <contributor>
        <username>Sample</username>
        <id>1</id>
      </contributor>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text bytes="{bytes}" xml:space="preserve">{text}</text>
    </revision>
  </page>
"""

# key -> local name (ns 0 has none); 4 is the project namespace.
SPACES = {
    "el": {
        -2: "Μέσο",
        -1: "Ειδικό",
        0: "",
        1: "Συζήτηση",
        4: "Βικιπαίδεια",
        6: "Αρχείο",
        10: "Πρότυπο",
        14: "Κατηγορία",
    },
    "vi": {
        -2: "Phương tiện",
        -1: "Đặc biệt",
        0: "",
        1: "Thảo luận",
        4: "Wikipedia",
        6: "Tập tin",
        10: "Bản mẫu",
        14: "Thể loại",
    },
    "ja": {
        -2: "メディア",
        -1: "特別",
        0: "",
        1: "ノート",
        4: "Wikipedia",
        6: "ファイル",
        10: "Template",
        14: "Category",
    },
    "fr": {
        -2: "Média",
        -1: "Spécial",
        0: "",
        1: "Discussion",
        4: "Wikipédia",
        6: "Fichier",
        10: "Modèle",
        14: "Catégorie",
    },
    "ru": {
        -2: "Медиа",
        -1: "Служебная",
        0: "",
        1: "Обсуждение",
        4: "Википедия",
        6: "Файл",
        10: "Шаблон",
        14: "Категория",
    },
}
SITENAMES = {
    "el": "Βικιπαίδεια",
    "vi": "Wikipedia",
    "ja": "Wikipedia",
    "fr": "Wikipédia",
    "ru": "Википедия",
}

# (title, ns, text, redirect target or None); ids are assigned in order.
PAGES = {
    "el": [
        (
            "Αθήνα",
            0,
            """{{Πόλη Ελλάδας|όνομα=Αθήνα|πληθυσμός=643452}}
[[Εικόνα:Acropolis of Athens.jpg|μικρογραφία|250px|Η [[Ακρόπολη Αθηνών|Ακρόπολη]] το 2012]]
Η '''Αθήνα''' είναι η πρωτεύουσα και η μεγαλύτερη πόλη της [[Ελλάδα|Ελλάδας]].<ref>{{Cite web|title=ΕΛΣΤΑΤ}}</ref>
== Ιστορία ==
[[Φωτογραφία:Parthenon 1978.JPG|thumb|Ο Παρθενώνας]]
Η πόλη κατοικείται συνεχώς για περισσότερα από 3.000 χρόνια.
== Παραπομπές ==
{{Παραπομπές}}
== Εξωτερικοί σύνδεσμοι ==
{{Commonscat|Athens}}
Δείτε επίσης [[:Κατηγορία:Πρωτεύουσες της Ευρώπης]].
[[Κατηγορία:Αθήνα]]
[[en:Athens]]""",
            None,
        ),
        (
            "Άργος (αποσαφήνιση)",
            0,
            """Ο όρος '''Άργος''' μπορεί να αναφέρεται:
* στο [[Άργος]], πόλη της Αργολίδας
* στον [[Άργος (μυθολογία)|Άργο]], πρόσωπο της μυθολογίας
{{αποσαφήνιση}}""",
            None,
        ),
        (
            "Παπαδόπουλος",
            0,
            """'''Παπαδόπουλος''' είναι ελληνικό επώνυμο. Μπορεί να αναφέρεται:
* [[Αλέξανδρος Παπαδόπουλος]], πολιτικός
{{Επώνυμα}}""",
            None,
        ),
        (
            "Νικολάου",
            0,
            """'''Νικολάου''' είναι ελληνικό επώνυμο.
* [[Μαρία Νικολάου]], ηθοποιός
{{Επώνυμο}}""",
            None,
        ),
        ("Ακρόπολη", 0, "#ΑΝΑΚΑΤΕΥΘΥΝΣΗ [[Ακρόπολη Αθηνών]]", "Ακρόπολη Αθηνών"),
        (
            "Πρότυπο:Επώνυμα",
            10,
            """{{Αποσαφήνιση/πλαίσιο|Σελίδα επωνύμων}}<includeonly>__DISAMBIG__</includeonly><noinclude>
Πρότυπο για σελίδες επωνύμων.</noinclude>""",
            None,
        ),
        ("Πρότυπο:Επώνυμο", 10, "#ΑΝΑΚΑΤΕΥΘΥΝΣΗ [[Πρότυπο:Επώνυμα]]", "Πρότυπο:Επώνυμα"),
        (
            "Πρότυπο:Παραπομπές",
            10,
            "<references /><noinclude>__DISAMBIG__ (τεκμηρίωση)</noinclude>",
            None,
        ),
    ],
    "vi": [
        (
            "Huế",
            0,
            """{{Thông tin khu dân cư|tên=Huế|loại=Thành phố trực thuộc trung ương}}
[[Hình:Hue Citadel gate.jpg|nhỏ|phải|Cổng [[Kinh thành Huế]] năm 1932]]
'''Huế''' là một thành phố trực thuộc trung ương ở miền Trung [[Việt Nam]].<ref name="gso">{{chú thích web|tựa đề=Tổng cục Thống kê}}</ref>
== Lịch sử ==
[[Ảnh:Hue Ngo Mon.png|nhỏ|250px|Ngọ Môn]]
Huế từng là kinh đô của [[nhà Nguyễn]] từ năm 1802 đến năm 1945.
Xem thêm [[:Thể loại:Thành phố của Việt Nam]] và [[Sông Hương|]].
== Chú thích ==
{{tham khảo}}
== Liên kết ngoài ==
=== Hình ảnh ===
{{Commonscat|Huế}}
[[Thể loại:Huế]]""",
            None,
        ),
        (
            "Sông Cái",
            0,
            """'''Sông Cái''' có thể là:
* [[Sông Cái (Nha Trang)]], sông ở Khánh Hòa
* [[Sông Cái (Phan Rang)]], sông ở Ninh Thuận
{{Trang định hướng}}""",
            None,
        ),
        (
            "Nguyễn Văn Thành (định hướng)",
            0,
            """'''Nguyễn Văn Thành''' có thể là:
* [[Nguyễn Văn Thành (tướng)]], tướng nhà Nguyễn
{{Tên người}}""",
            None,
        ),
        (
            "Trần Văn Hương (định hướng)",
            0,
            """'''Trần Văn Hương''' có thể là:
* [[Trần Văn Hương]], chính khách
{{Họ tên}}""",
            None,
        ),
        ("Cố đô Huế", 0, "#đổi [[Huế]]", "Huế"),
        (
            "Bản mẫu:Tên người",
            10,
            """{{Hộp thông báo|Trang định hướng tên người}}<includeonly>__DISAMBIG__[[Thể loại:Trang định hướng tên người]]</includeonly>""",
            None,
        ),
        ("Bản mẫu:Họ tên", 10, "#đổi [[Bản mẫu:Tên người]]", "Bản mẫu:Tên người"),
    ],
    "ja": [
        (
            "京都市",
            0,
            """{{日本の市|名前=京都市|人口=1463723}}
[[画像:Kiyomizu-dera in Kyoto.jpg|thumb|250px|[[清水寺]]の本堂]]
'''京都市'''（きょうとし）は、[[京都府]]南部に位置する[[市]]である。
== 歴史 ==
[[写真:Kyoto Gosho.JPG|thumb|左|京都御所]]
[[794年]]に[[平安京]]が置かれ、千年以上にわたり都であった。
== 脚注 ==
{{Reflist}}
== 関連項目 ==
{{Commonscat|Kyoto}}
[[Category:京都市|*]]""",
            None,
        ),
        (
            "京都 (曖昧さ回避)",
            0,
            """'''京都'''（きょうと）
* [[京都市]] - 京都府の府庁所在地
* [[京都府]] - 近畿地方の府
{{aimai}}""",
            None,
        ),
        (
            "佐藤",
            0,
            """'''佐藤'''（さとう）は日本人の姓。
* [[佐藤栄作]] - 政治家
{{人名の曖昧さ回避}}""",
            None,
        ),
        (
            "鈴木 (曖昧さ回避)",
            0,
            """'''鈴木'''は日本人の姓。
* [[鈴木大拙]] - 仏教学者
{{姓の曖昧さ回避}}""",
            None,
        ),
        ("平安京", 0, "#転送 [[京都市]]", "京都市"),
        (
            "Template:姓の曖昧さ回避",
            10,
            """{{Dmbox|姓の曖昧さ回避}}<includeonly>__DISAMBIG__</includeonly>""",
            None,
        ),
    ],
    "fr": [
        (
            "Lyon",
            0,
            """{{Infobox Commune de France|nom=Lyon|population=522250}}
[[Image:Lyon Saone.jpg|vignette|gauche|La [[Saône]] à Lyon]]
'''Lyon''' est une [[commune française]] située dans la région [[Auvergne-Rhône-Alpes]].
== Histoire ==
[[Photo:Fourviere 2019.jpeg|vignette|upright=1.2|La basilique de [[Fourvière]]]]
La ville est fondée en 43 av. J.-C. sous le nom de ''Lugdunum''.
{{Voir homonymes|Lyon (homonymie)}}
== Notes et références ==
{{Références}}
== Voir aussi ==
=== Articles connexes ===
{{Portail|Lyon}}
[[Catégorie:Lyon| ]]""",
            None,
        ),
        (
            "Mercure",
            0,
            """'''Mercure''' peut désigner :
* [[Mercure (planète)]]
* [[Mercure (chimie)]]
{{Homonymie}}""",
            None,
        ),
        (
            "Martin",
            0,
            """'''Martin''' est un nom de famille.
* [[Jean Martin]]
{{Patronymie}}""",
            None,
        ),
        (
            "Dupont",
            0,
            """'''Dupont''' est un nom de famille.
* [[Pierre Dupont]]
{{Nom de famille}}""",
            None,
        ),
        ("Lugdunum", 0, "#REDIRECTION [[Lyon]]", "Lyon"),
        (
            "Modèle:Nom de famille",
            10,
            """{{Bandeau|Page de patronymes}}<includeonly>__DISAMBIG__</includeonly>""",
            None,
        ),
    ],
    "ru": [
        (
            "Москва",
            0,
            """{{Значения|Москва (значения)}}
{{Город|Название=Москва|Население=13010112}}
[[Изображение:Moscow Kremlin.jpg|мини|справа|300px|[[Московский Кремль]] с реки]]
'''Москва́''' — столица [[Россия|России]], город федерального значения.
== История ==
[[Фото:Red Square 2018.png|мини|Красная площадь]]
Первое упоминание о Москве относится к 1147 году.
== Примечания ==
{{примечания}}
== Ссылки ==
{{Навигация|Викисклад=Moscow}}
[[Категория:Москва]]""",
            None,
        ),
        (
            "Ока (значения)",
            0,
            """'''Ока''':
* [[Ока]] — река, правый приток Волги
* [[Ока (приток Ангары)]]
{{неоднозначность}}""",
            None,
        ),
        (
            "Иванов",
            0,
            """'''Иванов''' — русская фамилия.
* [[Иванов, Александр Андреевич]] — художник
{{Список однофамильцев}}""",
            None,
        ),
        (
            "Петров",
            0,
            """'''Петров''' — русская фамилия.
* [[Петров, Василий Петрович]]
{{Фамилия-список}}""",
            None,
        ),
        ("Москва-река", 0, "#перенаправление [[Москва (река)]]", "Москва (река)"),
        (
            "Шаблон:Фамилия-список",
            10,
            """{{Ambox|Список однофамильцев}}<includeonly>__DISAMBIG__</includeonly>""",
            None,
        ),
    ],
}


def write(lang: str) -> Path:
    spaces = "\n".join(
        f'      <namespace key="{k}" case="first-letter"'
        + (f">{escape(v)}</namespace>" if v else " />")
        for k, v in sorted(SPACES[lang].items())
    )
    out = [HEAD.format(lang=lang, sitename=SITENAMES[lang], namespaces=spaces)]
    for n, (title, ns, text, redirect) in enumerate(PAGES[lang], 1):
        out.append(
            PAGE.format(
                title=escape(title),
                ns=ns,
                id=1000 + n,
                rev=5000 + n,
                redirect=f'\n    <redirect title="{escape(redirect, {chr(34): "&quot;"})}" />'
                if redirect
                else "",
                bytes=len(text.encode("utf-8")),
                text=escape(text),
            )
        )
    out.append("</mediawiki>\n")
    path = HERE / f"{lang}wiki-sample-pages-articles.xml"
    path.write_text("".join(out), encoding="utf-8")
    return path


if __name__ == "__main__":
    for lang in PAGES:
        print(write(lang))
