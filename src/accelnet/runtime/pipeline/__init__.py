"""Pipeline jobs: stages at once, frames between them through shared memory."""
