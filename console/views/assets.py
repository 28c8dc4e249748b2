"""What browsers ask the site for by convention rather than by link."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico where a page names no icon (the API's JSON, its docs): the console's.

    Not permanent: the target's hashed name changes with the icon.
    """
    return HttpResponseRedirect(static("console/favicon.svg"))
