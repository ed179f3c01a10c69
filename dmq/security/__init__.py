"""Authentication (TLS, SASL) and authorisation (ACLs)."""
