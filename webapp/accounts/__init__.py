"""Accounts: users, teams, memberships with roles, API tokens, and the permission checks built on them."""
