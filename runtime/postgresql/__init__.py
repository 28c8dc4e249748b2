"""Django's PostgreSQL backend, with Gatehouse's pool check (``ENGINE = "runtime.postgresql"``)."""
