"""The Data page's upload form: the same fields as the API's upload, the team among the user's member teams."""

from __future__ import annotations

from typing import Any

from django import forms

from webapp.accounts.models import Team

from .formats import KINDS, SUFFIXES


class UploadForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None, to_field_name="slug")
    name = forms.CharField(max_length=64, strip=False, help_text="configs name it data:<name>")
    kind = forms.ChoiceField(choices=[(k, k) for k in KINDS])
    split = forms.CharField(max_length=64, required=False, help_text="questions only: train (default), dev, test…")
    file = forms.FileField(help_text=f"FlashRAG JSONL or Search-R1 parquet ({', '.join(SUFFIXES)})")

    def __init__(self, *args: Any, teams: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams  # type: ignore[attr-defined]
        self.fields["file"].widget.attrs["accept"] = ",".join((*SUFFIXES, ".gz"))
