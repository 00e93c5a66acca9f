"""The one schema of every command's options: an :class:`Option` says how an option is given and
used, and its :class:`Needs` when it applies only with other options (or a kind of input).

``salientpp train`` declares every option as a :class:`~salientpp.train.config.TrainConfig`
field (:func:`option`); ``prepare`` its importers' options as
:class:`~salientpp.data.options.ImportOptions` fields; ``analyze``, ``simulate`` and ``bench``
their conditional options as :class:`Declared` entries (:mod:`salientpp.cache.options`). All of
them add their arguments with :func:`add_arguments` and refuse an option that does not apply
with :func:`check_applies`, in the one sentence of :func:`not_applicable`:
``"X applies only with Y; drop it, or use Y"``.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable

from .errors import InputError
from .parsing import flag_names


@dataclass(frozen=True)
class Needs:
    """The runs (or inputs) an option applies to: those where ``holds(context)``, which ``what``
    names as the options that make it so (``"--task link"``, ``"an ogb: or ogb-lsc: source"``).

    Attributes:
        what: what the option applies with, as the refusal names it.
        holds: ``holds(context)`` -> whether it applies; ``context`` is what :func:`check_applies`
            is given (a config, an argparse namespace, a source).
        instead: the other fix the refusal offers beside dropping the option (default ``"use WHAT"``).
    """

    what: str
    holds: Callable[[Any], bool]
    instead: str | None = None


def not_applicable(given: str, needs: Needs) -> InputError:
    """The one refusal of an option that does not apply: ``given`` (``"--num-negatives 3"``) applies
    only with ``needs.what``."""
    return InputError(f"{given} applies only with {needs.what}; drop it, or {needs.instead or 'use ' + needs.what}")


@dataclass(frozen=True)
class Option:
    """How one option is given and used.

    Attributes:
        help: the ``--help`` text; the default is appended (``default_text``, else the default).
        flag: the command-line flag; ``None``: ``--`` and the name with dashes; ``""``: a
            positional argument. A bool option's flag sets the opposite of its default.
        type: what argparse converts the text with (``int``, ``float``; ``str`` by default).
        parse: text -> value after argparse, which may raise :class:`InputError` (fanouts, sizes).
        choices, metavar: as in argparse.
        default_text: how the help states a default that is not the option's own (``None`` options).
        check: ``check(value, flag)`` raises :class:`InputError` for a bad value (not called for ``None``).
        agreed: (``train``) every rank of a job must hold the same value (after
            :meth:`~salientpp.train.config.TrainConfig.resolved`); a function: the same function of it
            (``--checkpoint-dir``: whether one is given, which decides whether checkpoints' collectives
            run; its path may differ between machines).
        plan_decides: (``train``) a cache plan (``--plan``) decides it, so the two cannot be given together.
        resume_matches: (``train``) a checkpoint is resumed only by a run with the same value.
        trains: (``train``) the value shapes the training itself, so a resumed run that changed it
            says so (``--checkpoint-dir`` and ``--resume`` are agreed on but only say where and whether).
        alias: ``(flag, value, help)``: a second flag that sets the option to ``value``, exclusive
            with the first (``--no-pipeline`` for ``--pipeline-depth 1``).
        needs: the option applies only where ``needs.holds(context)``; set to anything but its
            default elsewhere, it is refused (:func:`check_applies`).
    """

    help: str
    flag: str | None = None
    type: Callable[[str], Any] | None = None
    parse: Callable[[Any], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    default_text: str | None = None
    check: Callable[[Any, str], Any] | None = None
    agreed: bool | Callable[[Any], Any] = False
    plan_decides: bool = False
    resume_matches: bool = False
    trains: bool = True
    alias: tuple[str, Any, str] | None = None
    needs: Needs | None = None


@dataclass(frozen=True)
class Declared:
    """One declared option: its ``name`` (the attribute it is read into), its ``default`` and its
    :class:`Option`."""

    name: str
    default: Any
    option: Option

    @property
    def flag(self) -> str:
        """The command-line flag (``--batch-size``), or the name in capitals when positional."""
        flag = self.option.flag
        return self.name.upper() if flag == "" else flag or "--" + self.name.replace("_", "-")

    def given(self, value: Any) -> str:
        """How a refusal names the option set to ``value``: the flag, with the value as typed unless
        a bool (``--fanouts 15,10,5``, ``--self-loops``)."""
        if isinstance(value, bool):
            return self.flag
        return f"{self.flag} {','.join(map(str, value)) if isinstance(value, tuple) else value}"


def option(default: Any, help: str, **spec: Any) -> Any:
    """A dataclass field with ``default`` (``dataclasses.MISSING``: required) and the
    :class:`Option` of ``help`` and ``spec``."""
    return field(default=default, metadata={"option": Option(help, **spec)})


def declared(cls: type) -> tuple[Declared, ...]:
    """The options of a dataclass whose fields carry an :class:`Option` (made by :func:`option`),
    in field order; fields without one are not options."""
    return tuple(Declared(f.name, f.default, f.metadata["option"]) for f in fields(cls) if "option" in f.metadata)


def check_applies(values: Any, options: Iterable[Declared], context: Any = None) -> None:
    """:func:`not_applicable` for the first of ``options`` that ``values`` (read by attribute; a
    missing one is at its default) sets to anything but its default while its ``needs`` does not
    hold for ``context`` (default ``values`` itself)."""
    context = values if context is None else context
    for declaration in options:
        needs, value = declaration.option.needs, getattr(values, declaration.name, declaration.default)
        if needs is not None and value != declaration.default and not needs.holds(context):
            raise not_applicable(declaration.given(value), needs)


def add_arguments(parser: argparse.ArgumentParser, options: Iterable[Declared], defaults: bool = False) -> None:
    """One argument per declared option. With ``defaults`` False, arguments left out stay out of
    the namespace (``argparse.SUPPRESS``), so the declared default applies where the namespace is
    read into a dataclass and the options given can be told; with True, the namespace holds each
    option's default."""
    for declaration in options:
        spec = declaration.option
        if spec.flag == "":
            parser.add_argument(declaration.name, metavar=spec.metavar, help=spec.help)
            continue
        default = spec.default_text if spec.default_text is not None else declaration.default
        shown = isinstance(default, str) or not (default is None or isinstance(default, bool))
        help_text = f"{spec.help} (default {default})" if shown else spec.help
        kwargs: dict[str, Any] = {"dest": declaration.name, "help": help_text,
                                  "default": declaration.default if defaults else argparse.SUPPRESS}
        if isinstance(declaration.default, bool):
            kwargs["action"] = "store_false" if declaration.default else "store_true"
        else:
            kwargs.update(type=spec.type, choices=spec.choices, metavar=spec.metavar)
        group = parser
        if spec.alias is not None:
            group = parser.add_mutually_exclusive_group()
            alias, value, alias_help = spec.alias
            group.add_argument(alias, dest=declaration.name, action="store_const", const=value, help=alias_help,
                               default=argparse.SUPPRESS)
        group.add_argument(*flag_names(declaration.flag), **kwargs)


def values_from(args: argparse.Namespace, options: Iterable[Declared]) -> dict[str, Any]:
    """name -> value of the declared options given in ``args`` (those :func:`add_arguments` left out
    of it are not), each through its option's ``parse``."""
    given = vars(args)
    return {d.name: given[d.name] if d.option.parse is None else d.option.parse(given[d.name])
            for d in options if d.name in given}

