"""The Data page's upload form: the same fields as the API's upload, the team among the user's member teams, and
the field mapping for a questions file of a shape of its own."""

from __future__ import annotations

from typing import Any

from django import forms

from webapp.accounts.models import Team

from .formats import KINDS, SUFFIXES
from .shapes import MAPPING_FIELDS, FieldMap


class UploadForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None, to_field_name="slug")
    name = forms.CharField(max_length=64, strip=False, help_text="configs name it data:<name>")
    kind = forms.ChoiceField(choices=[(k, k) for k in KINDS])
    split = forms.CharField(max_length=64, required=False, help_text="questions only: train (default), dev, test…")
    file = forms.FileField(help_text=f"FlashRAG JSONL or Search-R1 parquet ({', '.join(SUFFIXES)})")
    question_field = forms.CharField(
        max_length=200, required=False, strip=False, help_text="a dotted path, such as extra_info.question"
    )
    answers_field = forms.CharField(
        max_length=200, required=False, strip=False, help_text="a dotted path, such as extra_info.answer"
    )
    id_field = forms.CharField(max_length=200, required=False, strip=False, help_text="none: the line number")

    def __init__(self, *args: Any, teams: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams  # type: ignore[attr-defined]
        self.fields["file"].widget.attrs["accept"] = ",".join((*SUFFIXES, ".gz"))

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in MAPPING_FIELDS]

    def mapping_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in MAPPING_FIELDS]

    def mapping_open(self) -> bool:
        """Whether to show the mapping fields: one is filled in, or the file's shape was not recognised."""
        named = any(self.data.get(name) for name in MAPPING_FIELDS) if self.is_bound else False
        return named or any("question_field" in str(e) for e in self.errors.get("file", []))

    def mapping(self) -> FieldMap:
        data = self.cleaned_data
        return FieldMap(data.get("question_field", ""), data.get("answers_field", ""), data.get("id_field", ""))
