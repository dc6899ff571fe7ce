-- name: disable_jit
-- disable_jit turns JIT compilation off for a session (see Connect).
--
-- Parameters: none.
-- Returns: no rows.
SET jit = off
