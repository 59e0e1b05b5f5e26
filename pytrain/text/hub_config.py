"""``tokenizer_config.json``, the file transformers reads beside ``tokenizer.json``: the special tokens
(``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``, ...), ``added_tokens_decoder`` and the
``chat_template``. pytrain reads them so a flow can use eos/bos and show the template; it does not render
Jinja templates (the template is exposed as the file's string)."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

from pytrain.errors import DataError

SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _fail(where: str, message: str) -> DataError:
    return DataError("tokenizer_config.json: {}: {}".format(where, message))


def _token_text(value: Any, where: str) -> Optional[str]:
    """A special token as written: a string, or an AddedToken object (``{"content": ...}``)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise _fail(where, "expected a token string or an object with its content, got {!r}".format(value))


class TokenizerConfig:
    """The parts of a ``tokenizer_config.json`` a flow needs. ``special`` maps ``bos_token`` ... to the
    token text (None when unset); ``added_tokens`` maps ids to the ``added_tokens_decoder`` entries;
    ``chat_template`` is the default Jinja template string (``chat_templates`` every named one), not
    rendered by pytrain."""

    def __init__(self, config: Dict[str, Any], chat_template: Optional[str] = None) -> None:
        if not isinstance(config, dict):
            raise _fail("(top level)", "expected an object, got {}".format(type(config).__name__))
        self.raw = config
        self.special: Dict[str, Optional[str]] = {n: _token_text(config.get(n), n) for n in SPECIAL_NAMES}
        self.added_tokens: Dict[int, Dict[str, Any]] = {}
        decoder = config.get("added_tokens_decoder") or {}
        if not isinstance(decoder, dict):
            raise _fail("added_tokens_decoder", "expected an object of id: token, got {!r}".format(decoder))
        for key, entry in decoder.items():
            if not str(key).isdigit() or not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
                raise _fail("added_tokens_decoder." + str(key), "expected an id and a token object with its content")
            self.added_tokens[int(key)] = entry
        self.chat_templates: Dict[str, str] = self._templates(config.get("chat_template"))
        if chat_template is not None:   # a chat_template.jinja beside it wins, as in transformers
            self.chat_templates["default"] = chat_template
        self.chat_template: Optional[str] = self.chat_templates.get("default")
        self.add_bos_token: Optional[bool] = config.get("add_bos_token")
        self.add_eos_token: Optional[bool] = config.get("add_eos_token")
        self.model_max_length: Optional[int] = config.get("model_max_length")

    @staticmethod
    def _templates(value: Any) -> Dict[str, str]:
        if value is None:
            return {}
        if isinstance(value, str):
            return {"default": value}
        if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                           and isinstance(t.get("template"), str) for t in value):
            return {t["name"]: t["template"] for t in value}
        raise _fail("chat_template", "expected a template string or a list of {name, template}")

    @classmethod
    def from_json(cls, text: Union[str, bytes, bytearray], chat_template: Optional[str] = None) -> "TokenizerConfig":
        """The config from the text (or UTF-8 bytes) of a tokenizer_config.json."""
        try:
            config = json.loads(text.decode("utf-8") if isinstance(text, (bytes, bytearray)) else text)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataError("tokenizer_config.json is not valid JSON: {}".format(e)) from None
        return cls(config, chat_template)
