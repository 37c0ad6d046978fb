"""Small pieces shared by the apps: service errors and the API's error format; no models."""
