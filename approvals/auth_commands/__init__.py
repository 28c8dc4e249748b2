"""Django's ``createsuperuser`` and ``changepassword``, replaced by audited ones.

An app of its own, listed before ``django.contrib.auth``: the first app naming a command wins.
The stock commands wrote users and passwords straight to the table, a second door beside the
audited user services (``approvals.users``) that every other change of access goes through.
"""
