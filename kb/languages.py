"""A text's language, and the PostgreSQL text-search configuration that reads it.

Detection is py3langid's (a naive Bayes classifier over byte n-grams whose model
ships in the wheel, 97 languages), restricted to CANDIDATES: the languages a
PostgreSQL snowball configuration stems plus the widespread ones it does not
(those read with `simple`). Code is left out of what is classified: a French page
full of YAML is French.

A section is classified alone when it holds at least MIN_SECTION_LETTERS letters
of prose; a shorter one ("Exemple", a table of names) takes its document's
language, which detection on a few words gets wrong too often (evals/README.md,
issue #27: on 2,755 paragraphs of English, French, Spanish and Russian docs,
53% right below 20 letters, 96% at 20-50, 99.8% at 50-80 but Spanish 94%, 99.9%
from 80 on; every section of the Kubernetes pages right with the rule). So a
document that mixes languages is read section by section, and its short sections
follow the document.
"""

from __future__ import annotations

import functools
import re

# ISO 639-1 codes -> PostgreSQL's built-in snowball configurations (`SELECT
# cfgname FROM pg_ts_config`); snowballstemmer's algorithms have the same names.
CONFIGS = {
    "ar": "arabic",
    "ca": "catalan",
    "da": "danish",
    "de": "german",
    "el": "greek",
    "en": "english",
    "es": "spanish",
    "eu": "basque",
    "fi": "finnish",
    "fr": "french",
    "ga": "irish",
    "hi": "hindi",
    "hu": "hungarian",
    "hy": "armenian",
    "id": "indonesian",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "nl": "dutch",
    "no": "norwegian",
    "nb": "norwegian",
    "nn": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
    "et": "estonian",
}
# Read with SIMPLE (no stemming, accents folded): widespread languages without a
# snowball configuration.
UNSTEMMED = (
    "bg",
    "cs",
    "fa",
    "he",
    "hr",
    "ja",
    "ko",
    "pl",
    "sk",
    "sl",
    "th",
    "uk",
    "vi",
    "zh",
)
SIMPLE = "simple_unaccent"  # migration 0019: `simple` with accents folded
DEFAULT = "en"
CANDIDATES = tuple(sorted({*CONFIGS, *UNSTEMMED} - {"nb", "nn"}))
# Letters of prose (code left out) a text needs to be classified on its own;
# below that, a section takes its document's language (measured, see above).
MIN_SECTION_LETTERS = 80
# Letters a question needs to be classified among its collection's languages
# (96% right at 20-50 letters among all candidates; fewer candidates, fewer errors).
MIN_QUESTION_LETTERS = 20
# Probability from which a question's language counts as recognised.
RECOGNISED = 0.8
# Enough of a document to tell its language: classification is linear in length.
DOCUMENT_SAMPLE = 20_000

_FENCED_RE = re.compile(
    r"^ {0,3}(```|~~~)[^\n]*\n.*?(?:^ {0,3}\1[^\n]*$|\Z)", re.M | re.S
)
_INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
_MARKUP_RE = re.compile(r"\{\{[<%].*?[%>]\}\}|<[^>\n]*>|\]\([^)\n]*\)|https?://\S+")
_LETTER_RE = re.compile(r"[^\W\d_]")


def config_for(code: str) -> str:
    """The text-search configuration for an ISO 639-1 code (or a configuration's
    own name): its snowball one, else SIMPLE."""
    if code in CONFIGS.values() or code == SIMPLE:
        return code
    return CONFIGS.get(code, SIMPLE)


def stemmer_name(config: str) -> str | None:
    """snowballstemmer's algorithm for a configuration (None for SIMPLE)."""
    return config if config in CONFIGS.values() else None


def prose(text: str) -> str:
    """The text without code, links' targets, HTML tags and Hugo shortcodes."""
    text = _FENCED_RE.sub(" ", text)
    text = _INLINE_CODE_RE.sub(" ", text)
    return _MARKUP_RE.sub(" ", text)


def letters(text: str) -> int:
    return len(_LETTER_RE.findall(text))


def detect(text: str, default: str = DEFAULT) -> str:
    """The ISO 639-1 code of the text's language among CANDIDATES; `default`
    when its prose has fewer than MIN_SECTION_LETTERS letters."""
    words = prose(text[:DOCUMENT_SAMPLE])
    if letters(words) < MIN_SECTION_LETTERS:
        return default
    return _identifier().classify(words)[0]


def document_language(text: str) -> str:
    """The language of a whole document (DEFAULT when it has hardly any prose)."""
    return detect(text)


def section_languages(
    sections: list[str], document: str, *, override: str = ""
) -> list[str]:
    """Each section's language: the `override` for all when given (an editor's
    choice for the whole source), else its own when it has prose enough to tell,
    else the document's."""
    if override:
        return [override] * len(sections)
    return [detect(text, default=document) for text in sections]


def question_language(question: str, present: list[str]) -> str:
    """The question's language among the `present` ones (ISO codes, the most
    likely first): the first when it has too few letters to tell or only one
    language is present."""
    present = [code for code in dict.fromkeys(present) if code in CANDIDATES]
    if not present:
        return DEFAULT
    if len(present) == 1 or letters(question) < MIN_QUESTION_LETTERS:
        return present[0]
    return _identifier(frozenset(present)).classify(question)[0]


def recognised_code(question: str) -> str:
    """The ISO 639-1 code of the question's language when its words tell it
    among all CANDIDATES with a probability of at least RECOGNISED, else ""
    (those read without a stemmer, Chinese or Polish, included)."""
    words = prose(question)
    if letters(words) < MIN_QUESTION_LETTERS:
        return ""
    code, probability = _identifier().classify(words)
    return code if probability >= RECOGNISED else ""


def recognised_config(question: str) -> str | None:
    """The configuration of the question's language told among all CANDIDATES
    with a probability of at least RECOGNISED, else None (and None under
    MIN_QUESTION_LETTERS letters of prose). Each of the 219 questions of the
    tuned golden sets (156 English, 21 each in French, Spanish and Russian) was
    told right, at 0.87 or more."""
    code = recognised_code(question)
    return config_for(code) if code else None


def code_for(config: str) -> str:
    """The ISO 639-1 code of a configuration (its first; "" for SIMPLE)."""
    return next((code for code, name in CONFIGS.items() if name == config), "")


_WORD_RE = re.compile(r"[^\W_][\w'-]*")
_ELISION_RE = re.compile(r"^(?:[cdjlmnst]|qu|jusqu|lorsqu|puisqu)'(?=\w)")
# An inverted pronoun or a demonstrative's particle: "avez-vous", "y a-t-il",
# "est-ce", "celui-ci" read as "avez", "a", "est", "celui" ("-on" only after
# "-t-": "add-on", "sign-on" are words).
_HYPHENED_RE = re.compile(
    r"(?<=\w)-(?:t-(?:il|elle|on)|je|tu|il|elle|nous|vous|ils|elles|ce|ci|là)$"
)
# The common words of the languages answered besides English (kb.retrieval.
# question.STOPWORDS): articles, prepositions, pronouns, conjunctions, the
# verbs "be" and "have", the words that ask. Counted as a question's words,
# they made "un", "de", "la" shared with every sentence (QA over Debian's
# French and Spanish manuals: a question of 6 words counted 11).
STOPWORDS = {
    "french": frozenset(
        """a à au aux avec ce ces cet cette dans de des du elle elles en est et
        être eux il ils je la le les leur leurs lui ma mais me même mes moi mon
        ne nos notre nous on ont ou où par pas pour qu que quel quelle quelles
        quels qui sa se ses son sont sur ta te tes toi ton tu un une vos votre
        vous y été était sera comment combien pourquoi quand faut peut dois
        doit ai as avons avez avoir suis es sommes êtes sont ça cela ceci dont
        quoi lequel laquelle lesquels lesquelles celui celle ceux celles""".split()
    ),
    "spanish": frozenset(
        """a al como con cual cuales cuando de del donde el ella ellas ellos en
        entre era es esta este esto está están fue ha han hay la las le les lo
        los me mi mis más no nos o para pero por que qué quien se sin sobre su
        sus te tu un una uno unos unas y ya cómo cuál cuáles cuándo dónde
        cuánto cuántos cuántas puedo debo son ser estar estoy estamos he has
        hemos tener tengo tiene tienen esa ese eso esas esos estas estos
        aquel aquella aquello cuyo cuya""".split()
    ),
    "russian": frozenset(
        """а без бы был была были было в во вот все всё вы где да для до его
        если есть еще ещё же за и из или им их к как какая какие каким какой
        когда кто ли между мне мы на над не нет но о об один он она они оно от
        по под при про с со так также то тот у уже что чтобы чем эта эти это
        этот я можно нужно сколько почему ему ей ней нём ним них её этой
        этого этому этим этом этих этими эту того тому той те тех теми ту
        всех всем всеми всего всему всей всю который которая которое которые
        которого которой котором которых которым которую которыми какого каком
        каких какую какому чего чему чём кого кому ком меня мной нас нам нами
        вас вам вами себя себе собой свой своя своё свои своего своей своих
        быть будет будут является являются надо""".split()
    ),
}


def stems(text: str, config: str) -> list[str]:
    """The text's words, lowercased and stemmed by snowball in the
    configuration's language (unstemmed for SIMPLE), without its common words
    (STOPWORDS) and French elisions ("l'option" is "option")."""
    words = _WORD_RE.findall(text.lower())
    if config == "french":
        words = [_HYPHENED_RE.sub("", _ELISION_RE.sub("", word)) for word in words]
    common = STOPWORDS.get(config, frozenset())
    words = [word for word in words if word not in common]
    name = stemmer_name(config)
    return _stemmer(name).stemWords(words) if name else words


@functools.cache
def _stemmer(name: str):
    import snowballstemmer

    return snowballstemmer.stemmer(name)


@functools.cache
def _identifier(languages: frozenset[str] = frozenset(CANDIDATES)):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(sorted(languages))
    return identifier
