"""Inbound: data coming into Gatehouse from outside.

Signed Standard Webhooks deliveries (KYC callbacks and the like) that decide a
waiting task as the endpoint's service principal, which resumes its thread:
``webhooks`` (endpoint registration, verification, decision) and ``api`` (the
``/api/webhooks/{name}`` receiver and endpoint administration).
"""
