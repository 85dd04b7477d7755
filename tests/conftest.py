"""The test tiers. A test in SLOW (a whole file: ALL) is marked `slow`: end-to-end runs of many
seconds each on 2 cores (the real smg gateway, a real Prometheus, kill -9 and signal trials,
namespaces, ramps of several levels against simulators, fuzzing that starts processes). The
default run (README's test command) leaves them out so it stays a few minutes; .ci/run runs them
as its second tier, `pytest -m slow`. The list was drawn from `pytest --durations` (each over
about 8 s on a loaded 2-core machine); a test that grows that long belongs here too.
"""

import pytest

ALL = None

SLOW: dict[str, "set[str] | None"] = {
    "test_exporter.py": {
        "test_ramp_headless_serves_metrics_during_the_ramp",
        "test_real_prometheus_scrapes_the_ramp",
    },
    "test_fleet_ramp.py": ALL,
    "test_observed_knee_e2e.py": ALL,
    "test_trace_e2e.py": ALL,
    "test_full_disk.py": ALL,
    "test_fuzz_inputs.py": ALL,
    "test_gateway.py": ALL,
    "test_launch.py": {
        "test_cli_all_failed_exit_3",
        "test_demo_command_short",
        "test_exception_without_stop_is_cleaned_at_exit",
        "test_sigterm_to_specmon_leaves_no_orphan",
        "test_two_arms_two_levels_restart_between",
    },
    "test_launch_fleet.py": ALL,
    "test_launch_secrets.py": {
        "test_launch_writes_no_key_anywhere",
    },
    "test_launch_shutdown.py": ALL,
    "test_load_client.py": {
        "test_sse_events_in_other_legal_shapes_read_the_same",
        "test_cancelled_request_closes_its_stream_and_the_server_aborts_it",
        "test_server_dying_mid_stream_and_a_stalled_server",
        "test_stale_keepalive_is_resent_and_refused_connection_recorded",
    },
    "test_memory_bounds.py": {
        "test_a_level_longer_than_its_ring_reads_its_first_samples_back",
        "test_attach_keeps_no_samples_and_records_every_tick",
    },
    "test_requests_rid.py": {
        "test_every_request_row_carries_the_servers_rid_as_the_wire_log_has_it",
    },
    "test_sim_gpu.py": {
        "test_simulated_arms_show_their_simulated_card_in_the_gpu_panes",
        "test_a_server_that_does_not_say_it_is_the_simulator_is_never_asked",
        "test_the_simulator_publishes_its_card_fp8_has_the_smaller_pool_and_power_rises_with_load",
    },
    "test_prefix_cache_live.py": ALL,
    "test_prefix_demo.py": ALL,
    "test_promfleet.py": ALL,
    "test_ramp_cli.py": {
        "test_ramp_against_a_dead_port_backs_off_and_exits_3",
        "test_ramp_headless_two_arms_prints_the_level_table",
    },
    "test_ramp_faults.py": ALL,
    "test_ramp_pause.py": ALL,
    "test_ramp_knee_last_level.py": ALL,
    "test_ramp_refusals.py": {"test_a_server_failing_every_request_is_backed_off_and_exits_3"},
    "test_ramp_warm_cache.py": ALL,
    "test_cli_exit_codes.py": {"test_a_signal_is_not_exit_0"},
    "test_ramp_rates_cli.py": {
        "test_rates_with_a_cap_headless_then_the_report",
    },
    "test_ramp_sim.py": {
        "test_knee_found_near_the_kv_prediction",
        "test_skip_ends_a_level_and_cancels_in_flight",
    },
    "test_ramp_workloads.py": {
        "test_shared_prefixes_hit_the_cache_and_buy_ttft",
        "test_rate_levels_offer_seeded_arrivals_and_cut_an_over_saturated_level",
        "test_slo_search_brackets_the_full_ramps_knee",
    },
    "test_replay_gateway_fleet.py": {
        "test_the_app_shows_the_gateways_panels_then_the_fleet_table",
    },
    "test_report.py": {
        "test_cli_bad_input_exits_2_with_one_line",
        "test_cli_png_and_html",
    },
    "test_secrets.py": {
        "test_attach_and_ramp_write_no_key_and_no_url_password",
    },
    "test_sim_external.py": ALL,
    "test_sim_seed.py": {
        "test_same_seed_same_answers_whatever_the_hash_salt",
    },
    "test_sim_server.py": {
        "test_faults",
        "test_flush_cache_busy_and_idle",
        "test_physics_queueing_when_pool_is_full",
    },
    "test_sources_faults.py": {
        "test_2000_refused_scrapes_keep_returning_a_state",
    },
    "test_sources_fuzz.py": {
        "test_fuzz_loads",
        "test_fuzz_server_info",
        "test_fuzz_the_fast_path_reads_what_the_parser_reads_or_hands_it_over",
    },
    "test_sources_live.py": {
        "test_one_arm_under_load",
        "test_server_dies_and_returns_gap_visible",
        "test_slow_metrics_never_delay_the_other_arms",
        "test_three_arms_one_refused_one_without_metrics",
    },
    "test_tui_app.py": {
        "test_live_one_arm_with_ramp",
        "test_live_three_arms_attach",
    },
    "test_tui_fleet.py": {
        "test_many_workers_get_the_fleet_table_sorted_and_drilled_into",
    },
    "test_unresolvable.py": {
        "test_launch_with_an_unresolvable_attach_arm_keeps_the_others",
    },
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = SLOW.get(item.path.name, ())
        if names is ALL or item.originalname in names:
            item.add_marker(pytest.mark.slow)
