"""The built-in offline QA set: questions and passages written from countryinfo + pycountry facts; no retrieval."""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pycountry
from countryinfo import all_countries

from inspo_engine.env.protocol import Passage
from inspo_engine.types import Question

SPLITS = ("train", "dev", "test")
KINDS = ("single", "bridge", "comparison")

# ISO 4217 fund and accounting codes: not what anyone means by "the currency used in X".
_FUND_CURRENCIES = frozenset({"BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "USS", "UYI", "UYW", "XDR"})
# Languages whose ISO 639 reference name differs from the everyday English one.
_LANGUAGE_NAMES = {"el": "Greek", "to": "Tongan"}
# Language codes that countryinfo lists by mistake (Aruba's Papiamento is not Panjabi).
_WRONG_LANGUAGES = frozenset({("ABW", "pa")})
# Countries whose short ISO name is ambiguous or unusual in English prose.
_COUNTRY_NAMES = {"COG": "Republic of the Congo", "RUS": "Russia", "BRN": "Brunei", "VAT": "Vatican City"}
# Region names that read as "the …" in a sentence.
_NEEDS_ARTICLE = frozenset({"Americas", "Caribbean"})
_MIN_POPULATION = 1000
_MIN_AREA_KM2 = 1.0
_MIN_RATIO = 1.25  # comparison questions only between clearly different numbers


@dataclass(frozen=True)
class _Country:
    """The clean facts kept about one country."""

    code: str
    name: str
    aliases: tuple[str, ...]
    official_name: str | None
    capital: str
    currencies: tuple[tuple[str, str], ...]  # (name, ISO code)
    languages: tuple[str, ...]
    calling_code: str
    population: int
    area: float
    region: str
    subregion: str
    local_region: str | None
    borders: tuple[str, ...]  # ISO alpha-3 codes


@dataclass(frozen=True)
class BuiltinDataset:
    """Train/dev/test questions (split by country, so no country appears in two splits) and the passage corpus."""

    train: list[Question]
    dev: list[Question]
    test: list[Question]
    corpus: list[Passage]
    evidence: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Question id -> ids of the passages that together answer it (HotpotQA's supporting facts)."""

    def split(self, name: str) -> list[Question]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; the built-in dataset has {', '.join(SPLITS)}")
        questions: list[Question] = getattr(self, name)
        return questions

    def stats(self) -> dict[str, dict[str, int]]:
        """Per split: questions per kind and in total; plus the corpus size."""
        result: dict[str, dict[str, int]] = {}
        for name in SPLITS:
            counts = Counter(question_kind(q) for q in self.split(name))
            result[name] = {kind: counts[kind] for kind in KINDS} | {"total": len(self.split(name))}
        countries = sum(p.id.startswith(_country_id("")) for p in self.corpus)
        result["corpus"] = {
            "passages": len(self.corpus),
            "countries": countries,
            "capitals": len(self.corpus) - countries,
        }
        return result


def question_kind(question: Question) -> str:
    """The kind encoded in a built-in question id.

    >>> question_kind(Question("builtin-bridge-00007", "?", ("x",)))
    'bridge'
    """
    return question.id.split("-")[1]


def _digest(*parts: str) -> int:
    """A stable integer from strings (never Python's salted `hash`)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


def _assign_splits(codes: Iterable[str], eval_fraction: float = 0.1) -> dict[str, str]:
    """Country code -> split: a stable shuffle of the codes, cut into test, dev and the rest for train."""
    order = sorted(codes, key=lambda code: _digest("inspo-builtin-split", code))
    n_eval = round(len(order) * eval_fraction)
    return {code: "test" if i < n_eval else "dev" if i < 2 * n_eval else "train" for i, code in enumerate(order)}


# -- facts -----------------------------------------------------------------------------------------------------


def _plain(name: str | None) -> str | None:
    """A name usable in prose: None for inverted ISO forms like 'Korea, Republic of' or '… (Malvinas)'."""
    return name if name and "," not in name and "(" not in name else None


def _country_names(code: str, listed: str) -> tuple[str, tuple[str, ...], str | None]:
    """Display name, every accepted alias (display first) and the official name, if any."""
    record = pycountry.countries.get(alpha_3=code)
    common = getattr(record, "common_name", None)
    official = getattr(record, "official_name", None)
    iso_name = getattr(record, "name", None)
    display = _COUNTRY_NAMES.get(code) or _plain(common) or _plain(iso_name) or listed
    official = _plain(official.removeprefix("the ") if official else None)
    official = None if official == display else official
    aliases = [display, listed, *(n for n in (common, _plain(iso_name), official) if n)]
    return display, tuple(dict.fromkeys(aliases)), official


def _currencies(codes: Iterable[str]) -> tuple[tuple[str, str], ...]:
    found = []
    for code in codes:
        record = pycountry.currencies.get(alpha_3=code)
        if record is not None and code not in _FUND_CURRENCIES:
            found.append((str(record.name), code))
    return tuple(found)


def _languages(country: str, codes: Iterable[str]) -> tuple[str, ...]:
    names = []
    for code in codes:
        record = pycountry.languages.get(**{"alpha_2" if len(code) == 2 else "alpha_3": code})
        if record is not None and (country, code) not in _WRONG_LANGUAGES:
            names.append(_LANGUAGE_NAMES.get(code) or str(record.name).split(" (")[0])
    return tuple(dict.fromkeys(names))


def _country(info: dict[str, Any]) -> _Country | None:
    """The clean facts of one countryinfo record, or None when any is missing or unusable."""
    code = (info.get("ISO") or {}).get("alpha3")
    capital, codes = info.get("capital"), info.get("callingCodes") or []
    population, area = info.get("population") or 0, info.get("area") or 0
    if not code or pycountry.countries.get(alpha_3=code) is None or not isinstance(capital, str):
        return None
    if not capital.strip() or "/" in capital or len(codes) != 1 or not str(codes[0]).isdigit():
        return None
    if population < _MIN_POPULATION or area < _MIN_AREA_KM2 or not info.get("region") or not info.get("subregion"):
        return None
    currencies, languages = _currencies(info.get("currencies") or []), _languages(code, info.get("languages") or [])
    if not currencies or not languages:
        return None
    name, aliases, official = _country_names(code, info["name"])
    subregion = str(info["subregion"]).replace("South-Eastern", "South-eastern")
    return _Country(
        code=code,
        name=name,
        aliases=aliases,
        official_name=official,
        capital=capital.strip(),
        currencies=currencies,
        languages=languages,
        calling_code=str(codes[0]),
        population=int(population),
        area=float(area),
        region=str(info["region"]),
        subregion=subregion,
        local_region=info.get("intermediateregion") or None,
        borders=tuple(sorted(b for b in info.get("borders") or [] if pycountry.countries.get(alpha_3=b))),
    )


def _load_countries() -> list[_Country]:
    """Every country with complete facts, sorted by code. Where two records claim one code (Burma and Myanmar),
    the one listed under an ISO name wins; if neither is, both go."""
    by_code: dict[str, list[tuple[str, _Country]]] = {}
    for info in sorted((c.info() for c in all_countries()), key=lambda info: str(info.get("name"))):
        country = _country(dict(info))
        if country is not None:
            by_code.setdefault(country.code, []).append((str(info["name"]), country))
    kept = []
    for code, claims in sorted(by_code.items()):
        record = pycountry.countries.get(alpha_3=code)
        iso_names = {getattr(record, key, None) for key in ("name", "common_name", "official_name")}
        if len(claims) > 1:
            claims = [(listed, country) for listed, country in claims if listed in iso_names]
        if len(claims) == 1:
            kept.append(claims[0][1])
    return kept


# -- passages --------------------------------------------------------------------------------------------------


def _join(items: Sequence[str]) -> str:
    """
    >>> _join(["a", "b", "c"])
    'a, b and c'
    """
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.2f}"


def _place(name: str) -> str:
    """
    >>> _place("Americas"), _place("Caribbean"), _place("Western Europe")
    ('the Americas', 'the Caribbean', 'Western Europe')
    """
    return f"the {name}" if name in _NEEDS_ARTICLE else name


def _country_passage(c: _Country, names: dict[str, str]) -> Passage:
    """Every fact but the capital, which only the capital's own passage states: bridge questions need both."""
    officially = f", officially the {c.official_name}," if c.official_name else ""
    precisely = f", more precisely {_place(c.local_region)}" if c.local_region else ""
    others = [a for a in c.aliases[1:] if a != c.official_name]
    sentences = [
        f"{c.name}{officially} is a country in {_place(c.region)}; its subregion is {c.subregion}{precisely}.",
        f"It is also known as {_join(others)}." if others else "",
        f"The currency of {c.name} is {_join([f'the {n} ({code})' for n, code in c.currencies])}.",
        f"Languages spoken in {c.name} include {_join(c.languages)}.",
        f"{c.name} has a population of {_number(c.population)} people and an area of {_number(c.area)} square "
        "kilometres.",
        f"The international calling code of {c.name} is +{c.calling_code}.",
        f"{c.name} shares land borders with {_join([names[b] for b in c.borders])}."
        if c.borders
        else f"{c.name} has no land borders.",
    ]
    return Passage(_country_id(c.code), c.name, " ".join(s for s in sentences if s))


def _capital_passage(c: _Country) -> Passage:
    place = _place(c.local_region or c.subregion)
    text = f"{c.capital} is the capital city of {c.name}. As the seat of its government, {c.capital} lies in {place}."
    return Passage(_capital_id(c.code), c.capital, text)


# -- questions -------------------------------------------------------------------------------------------------


class _Draft(NamedTuple):
    """A question before it has an id: the country that decides its split, and the passages that support it."""

    code: str
    text: str
    answers: tuple[str, ...]
    evidence: tuple[str, ...]


def _country_id(code: str) -> str:
    return f"builtin-country-{code}"


def _capital_id(code: str) -> str:
    return f"builtin-capital-{code}"


_SINGLE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "capital": ("What is the capital of {}?", "Which city is the capital of {}?"),
    "currency": ("Which currency is used in {}?", "What is the currency of {}?"),
    "calling_code": ("What is the international calling code of {}?", "What is the telephone country code of {}?"),
    "language": ("Which language is spoken in {}?", "Name a language spoken in {}."),
    "border": ("Which country shares a land border with {}?", "Name a country that borders {}."),
}
_BRIDGE_TEMPLATES: dict[str, str] = {
    "currency": "What currency is used in the country whose capital is {}?",
    "calling_code": "What is the international calling code of the country whose capital is {}?",
    "language": "Which language is spoken in the country whose capital is {}?",
}


def _answers(c: _Country, relation: str, aliases: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    if relation == "capital":
        return (c.capital,)
    if relation == "currency":
        return tuple(dict.fromkeys([n for n, _ in c.currencies] + [code for _, code in c.currencies]))
    if relation == "calling_code":
        return (f"+{c.calling_code}", c.calling_code)
    if relation == "language":
        return c.languages
    return tuple(dict.fromkeys(a for b in c.borders for a in aliases[b]))


def _single_hop(countries: list[_Country], aliases: dict[str, tuple[str, ...]]) -> list[_Draft]:
    drafts = []
    for c in countries:
        for relation, templates in _SINGLE_TEMPLATES.items():
            if relation == "border" and not c.borders:
                continue
            template = templates[_digest("template", relation, c.code) % len(templates)]
            evidence = _capital_id(c.code) if relation == "capital" else _country_id(c.code)
            drafts.append(_Draft(c.code, template.format(c.name), _answers(c, relation, aliases), (evidence,)))
    return drafts


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _bridge(countries: list[_Country], aliases: dict[str, tuple[str, ...]], texts: dict[str, str]) -> list[_Draft]:
    """Questions that name a country only by its capital. Skipped where the capital is shared, or where a word of it
    is in the country's passage (Bissau in Guinea-Bissau), which would let one search do a bridge's two hops."""
    capitals = Counter(c.capital for c in countries)
    drafts = []
    for c in countries:
        if capitals[c.capital] > 1 or _words(c.capital) & _words(texts[_country_id(c.code)]):
            continue
        for relation, template in _BRIDGE_TEMPLATES.items():
            evidence = (_capital_id(c.code), _country_id(c.code))
            drafts.append(_Draft(c.code, template.format(c.capital), _answers(c, relation, aliases), evidence))
    return drafts


_COMPARISONS: dict[str, tuple[Callable[[_Country], float], str, str]] = {
    "population": (lambda c: c.population, "has the larger population", "has the smaller population"),
    "area": (lambda c: c.area, "is larger by area", "is smaller by area"),
}


def _partner(c: _Country, pool: list[_Country], value: Callable[[_Country], float], salt: str) -> _Country | None:
    """A stable pseudo-random country of the pool whose value clearly differs, preferring c's own region."""
    fits = [o for o in pool if o.code != c.code and max(value(o), value(c)) >= _MIN_RATIO * min(value(o), value(c))]
    near = [o for o in fits if o.region == c.region] or fits
    return min(near, key=lambda o: _digest(salt, c.code, o.code), default=None)


def _comparison(countries: list[_Country], splits: dict[str, str]) -> list[_Draft]:
    """One question per country and attribute, against a partner from the same split (so splits stay disjoint)."""
    drafts: list[_Draft] = []
    seen: set[tuple[str, ...]] = set()
    for c in countries:
        pool = [o for o in countries if splits[o.code] == splits[c.code]]
        for attribute, (value, larger, smaller) in _COMPARISONS.items():
            other = _partner(c, pool, value, attribute)
            if other is None:
                continue
            key = (attribute, *sorted((c.code, other.code)))
            if key in seen:
                continue
            seen.add(key)
            bits = _digest("comparison", attribute, c.code, other.code)
            first, second = (c, other) if bits & 1 else (other, c)
            wants_larger = bool(bits & 2)
            winner = max(c, other, key=value) if wants_larger else min(c, other, key=value)
            phrase = larger if wants_larger else smaller
            text = f"Which country {phrase}, {first.name} or {second.name}?"
            drafts.append(_Draft(c.code, text, winner.aliases, (_country_id(first.code), _country_id(second.code))))
    return drafts


# -- assembly --------------------------------------------------------------------------------------------------


def _number_drafts(kind: str, drafts: list[_Draft]) -> list[tuple[Question, _Draft]]:
    return [(Question(f"builtin-{kind}-{n:05d}", d.text, d.answers), d) for n, d in enumerate(drafts)]


def _build() -> BuiltinDataset:
    countries = _load_countries()
    names = {c.code: c.name for c in countries}
    aliases = {c.code: c.aliases for c in countries}
    for record in sorted(pycountry.countries, key=lambda r: str(r.alpha_3)):
        code = str(record.alpha_3)
        if code not in names:
            names[code] = _country_names(code, str(record.name))[0]
            aliases[code] = (names[code],)  # no passage of its own states other names
    corpus = [_country_passage(c, names) for c in countries] + [_capital_passage(c) for c in countries]
    splits = _assign_splits(c.code for c in countries)
    numbered = [
        *_number_drafts("single", _single_hop(countries, aliases)),
        *_number_drafts("bridge", _bridge(countries, aliases, {p.id: p.text for p in corpus})),
        *_number_drafts("comparison", _comparison(countries, splits)),
    ]
    by_split = {name: [q for q, d in numbered if splits[d.code] == name] for name in SPLITS}
    evidence = {q.id: d.evidence for q, d in numbered}
    return BuiltinDataset(by_split["train"], by_split["dev"], by_split["test"], corpus, evidence)


@functools.cache
def builtin_dataset() -> BuiltinDataset:
    """The built-in dataset; the same questions, ids and passages on every machine and in every process."""
    return _build()


def stats_markdown() -> str:
    """A markdown table of the built-in dataset's sizes, for the docs."""
    stats = builtin_dataset().stats()
    lines = ["| split | single-hop | bridge | comparison | total |", "|---|---:|---:|---:|---:|"]
    for name in SPLITS:
        row = stats[name]
        lines.append(f"| {name} | {row['single']} | {row['bridge']} | {row['comparison']} | {row['total']} |")
    corpus = stats["corpus"]
    lines.append("")
    lines.append(
        f"Corpus: {corpus['passages']} passages ({corpus['countries']} countries, {corpus['capitals']} capital cities)."
    )
    return "\n".join(lines)
