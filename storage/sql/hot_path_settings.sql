-- name: hot_path_settings
-- hot_path_settings sets, for the session, the settings of a hot-path connection (see
-- HotPathSettings): generic plans, and the tally written inline (migration 0013).
--
-- Parameters: none.
-- Returns: set_config, set_config (the new values; ignored).
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
	set_config('taskforge.tally', 'inline', false)
