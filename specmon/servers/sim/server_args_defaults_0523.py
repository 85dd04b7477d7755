"""SGLang 0.5.23 ServerArgs as /server_info reports them (captured from the real CPU server,
fields resolved by __post_init__ included); the simulator overrides what its profile decides.
TOP_LEVEL_ONLY: arguments 0.5.23 lists at the top of /server_info but leaves out of
internal_states[0] (the scheduler's copy)."""

from specmon.servers.sim.server_args_defaults import SERVER_ARGS_DEFAULTS

# 0.5.23's arguments in the order it lists them: 0.5.10's value where 0.5.23 kept it
# (SERVER_ARGS_DEFAULTS), else the one below. 0.5.23 dropped 27 of 0.5.10's.
_ORDER_0523 = """
model_path tokenizer_path tokenizer_mode tokenizer_backend tokenizer_worker_num
detokenizer_worker_num skip_tokenizer_init load_format model_loader_extra_config
trust_remote_code context_length is_embedding enable_multimodal revision model_impl
model_config_parser json_model_override_args dtype quantization quantization_param_path
kv_cache_dtype enable_fp32_lm_head modelopt_quant modelopt_checkpoint_restore_path
modelopt_checkpoint_save_path modelopt_export_path quantize_and_serve rl_quant_profile
enable_tf32_matmul mem_fraction_static max_running_requests max_queued_requests max_total_tokens
chunked_prefill_size prefill_decode_interval enable_dynamic_chunking max_prefill_tokens
prefill_max_requests schedule_policy enable_priority_scheduling disable_priority_preemption
default_priority_value abort_on_priority_when_disabled schedule_low_priority_values_first
priority_scheduling_preemption_threshold retraction_policy schedule_conservativeness page_size
c128_page_size swa_full_tokens_ratio disable_hybrid_swa_memory radix_eviction_policy
radix_eviction_policy_config prefill_only_disable_kv_cache disable_radix_cache
enable_page_major_kv_layout enable_unified_memory disable_chunked_prefix_cache
disable_overlap_schedule num_continuous_decode_steps scheduler_recv_interval enable_mixed_chunk
nccl_port dist_timeout dist_init_addr gated_launch_port nnodes node_rank tp_size dcp_size
pp_size pp_max_micro_batch_size pp_async_batch_depth dp_size attn_dp_size load_balance_method
attn_cp_size moe_dp_size dwdp_size dcp_comm_backend dcp_replicate_q_proj enable_prefill_cp
cp_strategy enable_dsa_cache_layer_split enable_cp_decode_attn_tp enable_kv_cache_sharding
enable_dp_attention enable_dp_attention_local_control_broadcast enable_dp_lm_head
enable_tp_lm_head_all_to_all enable_attn_tp_input_scattered enable_shared_experts_attn_tp
shared_experts_tp_size enable_dense_mlp_attn_tp enable_layernorm_sp disable_attn_tp_gather
enable_p2p_check device base_gpu_id gpu_id_step random_seed mlx_enable_sampling watchdog_timeout
soft_watchdog_timeout sleep_on_idle use_ray custom_sigquit_handler numa_node gc_threshold host
port fastapi_root_path smg_grpc_mode grpc_mode grpc_port grpc_worker_threads sidecar
sidecar_args skip_server_warmup warmups enable_http2 http2_max_concurrent_streams
http2_initial_connection_window_size ssl_keyfile ssl_certfile ssl_ca_certs ssl_keyfile_password
enable_ssl_refresh api_key admin_api_key served_model_name weight_version chat_template
trust_request_chat_template hf_chat_template_name completion_template file_storage_path
enable_cache_report return_input_ids return_output_ids reasoning_parser
default_chat_template_kwargs strip_thinking_cache enable_strict_thinking tool_call_parser
tool_server sampling_defaults asr_max_buffer_seconds asr_max_concurrent_sessions
preferred_sampling_params allow_auto_truncate stream_interval batch_notify_size
stream_response_default_include_usage incremental_streaming_output enable_streaming_session
enable_session_radix_cache log_level log_level_http log_requests log_requests_level
log_requests_format log_requests_target uvicorn_access_log_exclude_prefixes crash_dump_folder
show_time_cost enable_metrics smg_http_sidecar_port enable_mfu_metrics
enable_metrics_for_all_schedulers load_snapshot_publish_interval
tokenizer_metrics_custom_labels_header tokenizer_metrics_allowed_custom_labels
extra_metric_labels bucket_time_to_first_token bucket_inter_token_latency
bucket_e2e_request_latency prompt_tokens_buckets generation_tokens_buckets
gc_warning_threshold_secs decode_log_interval enable_request_time_stats_logging kv_events_config
load_publish_endpoint enable_forward_pass_metrics forward_pass_metrics_worker_id
forward_pass_metrics_ipc_name enable_trace trace_modules otlp_traces_endpoint
export_metrics_to_file export_metrics_to_file_dir stat_loggers
constrained_json_whitespace_pattern constrained_json_disable_any_whitespace
constrained_json_max_whitespace_cnt attention_backend decode_attention_backend
enable_lean_attention prefill_attention_backend sampling_backend grammar_backend
radix_cache_backend mm_attention_backend fp8_gemm_runner_backend fp4_gemm_runner_backend
bf16_gemm_backend dsa_prefill_backend dsv4_prefill_backend dsa_decode_backend
dsa_paged_mqa_logits_backend dsa_topk_backend disable_flashinfer_autotune
flashinfer_autotune_skip_ops mamba_backend cuda_graph_config cuda_graph_backend_decode
cuda_graph_backend_prefill cuda_graph_max_bs_decode cuda_graph_max_bs_prefill
cuda_graph_bs_decode cuda_graph_bs_prefill cuda_graph_prefill_max_context
disable_prefill_cuda_graph disable_decode_cuda_graph disable_cuda_graph
disable_cuda_graph_padding enable_profile_cuda_graph enable_cudagraph_gc debug_cuda_graph
enable_layerwise_nvtx_marker enable_nccl_nvls enable_symm_mem triton_attention_reduce_in_fp32
triton_attention_num_kv_splits triton_attention_split_tile_size flashinfer_mla_disable_ragged
enable_fused_qk_norm_rope enable_precise_embedding_interpolation enable_fused_moe_sum_all_reduce
enable_deepseek_v4_fp4_indexer disable_custom_all_reduce enable_mscclpp enable_torch_symm_mem
enable_scattered_sconv pre_warm_nccl boundary_reduction enable_quant_communications
enable_flashinfer_allreduce_fusion enforce_disable_flashinfer_allreduce_fusion
flashinfer_allreduce_fusion_backend enable_aiter_allreduce_fusion enable_torch_compile
enable_torch_compile_debug_mode torch_compile_max_bs speculative_algorithm uno_lora_path
speculative_draft_model_path speculative_draft_model_revision speculative_draft_load_format
speculative_num_steps speculative_eagle_topk speculative_num_draft_tokens
speculative_dflash_block_size speculative_dspark_block_size speculative_dspark_sps_table_path
speculative_dspark_confidence_sts_path speculative_dspark_align_verify_tokens_to_graph_tier
speculative_accept_threshold_single speculative_accept_threshold_acc
speculative_use_rejection_sampling speculative_token_map speculative_attention_mode
speculative_draft_attention_backend speculative_dsa_topk_backend
speculative_draft_kv_cache_dtype speculative_draft_window_size speculative_moe_runner_backend
speculative_moe_a2a_backend speculative_enable_w4a4_mxfp4_megamoe
speculative_draft_model_quantization _speculative_draft_quantization_explicitly_set
enable_multi_layer_eagle speculative_adaptive speculative_adaptive_config
decoupled_spec_bind_endpoint decoupled_spec_connect_endpoints decoupled_spec_rank
decoupled_spec_role spec_trace_dir speculative_ngram_min_bfs_breadth
speculative_ngram_max_bfs_breadth speculative_ngram_match_type speculative_ngram_max_trie_depth
speculative_ngram_capacity speculative_ngram_external_corpus_path
speculative_ngram_external_sam_budget speculative_ngram_external_corpus_max_tokens ep_size
moe_a2a_backend enable_w4a4_mxfp4_megamoe deepep_v2_mode moe_runner_backend
flashinfer_mxfp4_moe_precision deepep_mode fuseep_mode deepep_dispatcher_output_dtype
ep_num_redundant_experts ep_dispatch_algorithm init_expert_location enable_eplb eplb_algorithm
eplb_rebalance_num_iterations eplb_rebalance_layers_per_chunk
eplb_min_rebalancing_utilization_threshold expert_distribution_recorder_mode
expert_distribution_recorder_buffer_size expert_balancedness_report_mode deepep_config
moe_dense_tp_size elastic_ep_backend enable_elastic_expert_backup mooncake_ib_device
enable_waterfill ep_join_mode ep_join_rank_offset elastic_ep_initial_size max_ep_size
elastic_ep_scale_timeout disable_flashinfer_cutlass_moe_fp4_allgather
disable_shared_experts_fusion enforce_shared_experts_fusion max_mamba_cache_size mamba_ssm_dtype
mamba_max_states_per_path enable_mamba_cache_stochastic_rounding mamba_cache_philox_rounds
mamba_full_memory_ratio mamba_radix_cache_strategy uses_mamba_radix_cache mamba_track_interval
enable_int8_mamba_checkpoint int8_mamba_ckpt_size linear_attn_backend linear_attn_decode_backend
linear_attn_prefill_backend linear_attn_verify_backend enable_linear_replayssm
linear_replayssm_cache_len enable_linear_replayssm_spec enable_hierarchical_cache
hicache_host_memory_mode hicache_ratio hicache_size hicache_write_policy hicache_io_backend
hicache_mem_layout hicache_storage_backend hicache_storage_prefetch_policy
hicache_storage_backend_extra_config hicache_storage_prefetch_retry_poll_interval
hicache_storage_prefetch_retry_max_attempts enable_unified_cache_external_linker
unified_cache_external_linker_backend enable_hisparse hisparse_config
enable_broadcast_mm_inputs_process enable_prefix_mm_cache mm_enable_dp_encoder mm_process_config
mm_processor_worker_num mm_io_worker_num allowed_media_domains media_url_max_file_size_mb
mm_preprocess_cache_size_mb trust_mm_content_hashes limit_mm_data_per_request
enable_mm_global_cache image_processor_backend mm_global_cache_backend
disable_fast_image_processor mm_feature_transport enable_lora enable_lora_overlap_loading
max_lora_rank lora_target_modules lora_paths max_loaded_loras max_loras_per_batch
lora_eviction_policy lora_backend max_lora_chunk_size experts_shared_outer_loras
lora_use_virtual_experts lora_strict_loading lora_drain_wait_threshold enable_two_batch_overlap
enable_single_batch_overlap tbo_token_distribution_threshold cpu_offload_gb offload_group_size
offload_num_in_group offload_prefetch_step offload_mode enable_lmcache lmcache_config_file
enable_flexkv flexkv_config_file kt_weight_path kt_method kt_cpuinfer kt_threadpool_count
kt_num_gpu_experts kt_max_deferred_experts_per_token dllm_algorithm dllm_algorithm_config
dllm_fdfo disaggregation_mode disaggregation_transfer_backend disaggregation_bootstrap_port
disaggregation_ib_device disaggregation_decode_enable_radix_cache
disaggregation_decode_enable_offload_kvcache disaggregation_decode_retraction_backup
num_reserved_decode_tokens disaggregation_decode_extra_slots
disaggregation_decode_polling_interval optimistic_prefill_attempts encoder_only language_only
language_model_only encoder_transfer_backend encoder_urls encoder_bootstrap_port
encoder_register_urls enable_adaptive_dispatch_to_encoder enable_pdmux pdmux_config_path
sm_group_num startup_weight_load_mode custom_weight_loader weight_loader_disable_mmap
weight_loader_prefetch_checkpoints weight_loader_prefetch_num_threads
weight_loader_drop_cache_after_load remote_instance_weight_loader_seed_instance_ip
remote_instance_weight_loader_seed_instance_service_port
remote_instance_weight_loader_send_weights_group_ports remote_instance_weight_loader_backend
remote_instance_weight_loader_start_seed_via_transfer_engine engine_info_bootstrap_port
modelexpress_config download_dir model_checksum delete_ckpt_after_loading decrypted_config_file
decrypted_draft_config_file checkpoint_engine_wait_weights_before_ready enable_prefill_delayer
prefill_delayer_max_delay_passes prefill_delayer_token_usage_low_watermark
prefill_delayer_forward_passes_buckets prefill_delayer_wait_seconds_buckets
prefill_delayer_queue_min_ratio prefill_delayer_max_delay_ms min_free_slots_delay
enable_deterministic_inference rl_on_policy_target kv_canary kv_canary_real_data
kv_canary_sweep_interval enable_dynamic_batch_tokenizer dynamic_batch_tokenizer_batch_size
dynamic_batch_tokenizer_batch_timeout enable_tokenizer_batch_encode
disable_tokenizer_batch_decode debug_tensor_dump_output_folder debug_tensor_dump_layers
debug_tensor_dump_input_file enable_memory_saver enable_weights_cpu_backup
enable_draft_weights_cpu_backup enable_custom_logit_processor enable_return_hidden_states
return_hidden_states_mode enable_return_routed_experts enable_return_indexer_topk
sampling_mask_max_tokens disable_outlines_disk_cache enable_mis weight_cache_mode
weight_cache_socket weight_cache_timeout forward_hooks msprobe_dump_config ple_offload_embedding
ple_offload_backend ple_offload_dir disaggregation_enable_kv_checksum enable_pd_role_switch
speculative_domino_candidate_pool_size flashinfer_a2a_dispatch_type
cuda_graph_max_seq_len_prefill prefill_kv_cache_dequant_dtype dsv4_attn_backend
otlp_service_name _radix_eviction_policy_explicitly_set hicache_host_memory_fraction
enable_linker_mla_dedup _swa_full_tokens_ratio_explicitly_set swa_prefix_tails
enable_encoder_swa_bounded_replay enable_decoder_swa_bounded_replay enable_response_store
disaggregation_decode_host_receive_threshold qsa_indexer_dtype
disaggregation_decode_allocation_policy speculative_boundary_reduction
speculative_use_block_verification speculative_draft_sink_size
disable_aiter_allreduce_fusion_in_prefill disable_aiter_allreduce_fusion_in_decode
enable_amd_monokernel dsa_triton_union enable_dsa_fused_indexer enable_cp_tp_group_sharing
enable_watermark watermark_config watermark_key watermark_key_b watermark_context_window
watermark_mixing_probability watermark_max_probability watermark_default_enabled
watermark_enforce_all grpc_response_timeout_secs enable_paged_experts paged_experts_num_resident
enable_nvidia_megakernel enable_megamoe_for_layernorm_sp enable_http_worker_reuseport
prefill_decode_interval_min_bs unified_cache_external_linker_config
enable_return_aux_hidden_states aux_hidden_state_capture return_aux_hidden_state_layer_ids
hicache_object_layout kv_events frontend
""".split()

_NEW_IN_0523 = {
    'tokenizer_backend': 'huggingface',
    'detokenizer_worker_num': 1,
    'model_config_parser': 'auto',
    'enable_tf32_matmul': False,
    'mem_fraction_static': 0.716,
    'chunked_prefill_size': 4096,
    'prefill_decode_interval': 0,
    'retraction_policy': 'length',
    'c128_page_size': 16,
    'radix_eviction_policy_config': None,
    'prefill_only_disable_kv_cache': False,
    'enable_page_major_kv_layout': False,
    'enable_unified_memory': False,
    'gated_launch_port': None,
    'dcp_size': 1,
    'attn_dp_size': 1,
    'dwdp_size': 1,
    'dcp_comm_backend': 'ag_rs',
    'dcp_replicate_q_proj': None,
    'enable_prefill_cp': False,
    'cp_strategy': None,
    'enable_dsa_cache_layer_split': False,
    'enable_cp_decode_attn_tp': False,
    'enable_kv_cache_sharding': False,
    'enable_dp_attention_local_control_broadcast': False,
    'enable_tp_lm_head_all_to_all': False,
    'enable_shared_experts_attn_tp': False,
    'shared_experts_tp_size': None,
    'enable_dense_mlp_attn_tp': False,
    'enable_layernorm_sp': False,
    'disable_attn_tp_gather': False,
    'random_seed': 406974789,
    'mlx_enable_sampling': False,
    'sleep_on_idle': True,
    'port': 39445,
    'smg_grpc_mode': False,
    'grpc_port': None,
    'grpc_worker_threads': 4,
    'sidecar': None,
    'sidecar_args': None,
    'enable_http2': False,
    'http2_max_concurrent_streams': 200,
    'http2_initial_connection_window_size': 1048576,
    'trust_request_chat_template': False,
    'file_storage_path': None,
    'return_input_ids': False,
    'return_output_ids': False,
    'default_chat_template_kwargs': None,
    'strip_thinking_cache': False,
    'enable_strict_thinking': False,
    'asr_max_buffer_seconds': 60,
    'asr_max_concurrent_sessions': 32,
    'batch_notify_size': 16,
    'enable_session_radix_cache': False,
    'smg_http_sidecar_port': None,
    'load_snapshot_publish_interval': 15,
    'load_publish_endpoint': None,
    'enable_forward_pass_metrics': False,
    'forward_pass_metrics_worker_id': '',
    'forward_pass_metrics_ipc_name': None,
    'trace_modules': 'request',
    'stat_loggers': None,
    'constrained_json_max_whitespace_cnt': None,
    'enable_lean_attention': None,
    'radix_cache_backend': None,
    'bf16_gemm_backend': 'auto',
    'dsa_prefill_backend': None,
    'dsv4_prefill_backend': 'auto',
    'dsa_decode_backend': None,
    'dsa_paged_mqa_logits_backend': 'auto',
    'dsa_topk_backend': 'sgl-kernel',
    'flashinfer_autotune_skip_ops': None,
    'cuda_graph_config': {'decode': {'backend': 'full', 'max_bs': 32, 'bs': [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 24, 26, 28, 30, 32], 'tc_compiler': 'eager', 'max_context_size': None, 'full_prefill_max_req': None, 'full_prefill_prefix_chunk_tokens': None, 'max_seq_len': None}, 'prefill': {'backend': 'disabled', 'max_bs': 4096, 'bs': [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096], 'tc_compiler': 'eager', 'max_context_size': None, 'full_prefill_max_req': None, 'full_prefill_prefix_chunk_tokens': None, 'max_seq_len': None}},
    'cuda_graph_backend_decode': None,
    'cuda_graph_backend_prefill': None,
    'cuda_graph_max_bs_decode': None,
    'cuda_graph_max_bs_prefill': None,
    'cuda_graph_bs_decode': None,
    'cuda_graph_bs_prefill': None,
    'cuda_graph_prefill_max_context': None,
    'disable_prefill_cuda_graph': False,
    'disable_decode_cuda_graph': False,
    'debug_cuda_graph': False,
    'enable_fused_qk_norm_rope': None,
    'enable_deepseek_v4_fp4_indexer': False,
    'enable_scattered_sconv': False,
    'boundary_reduction': 'rs+rsv',
    'enable_quant_communications': False,
    'flashinfer_allreduce_fusion_backend': None,
    'uno_lora_path': None,
    'speculative_dflash_block_size': None,
    'speculative_dspark_block_size': None,
    'speculative_dspark_sps_table_path': None,
    'speculative_dspark_confidence_sts_path': None,
    'speculative_dspark_align_verify_tokens_to_graph_tier': False,
    'speculative_use_rejection_sampling': False,
    'speculative_dsa_topk_backend': 'sgl-kernel',
    'speculative_draft_kv_cache_dtype': None,
    'speculative_draft_window_size': None,
    'speculative_enable_w4a4_mxfp4_megamoe': None,
    '_speculative_draft_quantization_explicitly_set': False,
    'speculative_adaptive': False,
    'speculative_adaptive_config': None,
    'decoupled_spec_bind_endpoint': None,
    'decoupled_spec_connect_endpoints': None,
    'decoupled_spec_rank': None,
    'decoupled_spec_role': 'null',
    'spec_trace_dir': None,
    'speculative_ngram_external_corpus_path': None,
    'speculative_ngram_external_sam_budget': 0,
    'speculative_ngram_external_corpus_max_tokens': 10000000,
    'enable_w4a4_mxfp4_megamoe': False,
    'deepep_v2_mode': 'direct',
    'fuseep_mode': 2,
    'deepep_dispatcher_output_dtype': 'auto',
    'expert_balancedness_report_mode': 'off',
    'enable_waterfill': False,
    'ep_join_mode': None,
    'ep_join_rank_offset': 0,
    'elastic_ep_initial_size': None,
    'max_ep_size': None,
    'elastic_ep_scale_timeout': 600,
    'enforce_shared_experts_fusion': False,
    'mamba_max_states_per_path': -1,
    'enable_mamba_cache_stochastic_rounding': False,
    'mamba_cache_philox_rounds': 0,
    'mamba_radix_cache_strategy': 'auto',
    'uses_mamba_radix_cache': False,
    'enable_int8_mamba_checkpoint': False,
    'int8_mamba_ckpt_size': None,
    'linear_attn_verify_backend': None,
    'enable_linear_replayssm': False,
    'linear_replayssm_cache_len': 16,
    'enable_linear_replayssm_spec': False,
    'hicache_host_memory_mode': 'cache',
    'hicache_mem_layout': 'page_first',
    'hicache_storage_prefetch_policy': 'timeout',
    'hicache_storage_prefetch_retry_poll_interval': 8,
    'hicache_storage_prefetch_retry_max_attempts': 8,
    'enable_unified_cache_external_linker': False,
    'unified_cache_external_linker_backend': 'mooncake',
    'mm_processor_worker_num': 0,
    'mm_io_worker_num': 0,
    'allowed_media_domains': [],
    'media_url_max_file_size_mb': 64,
    'mm_preprocess_cache_size_mb': None,
    'trust_mm_content_hashes': False,
    'image_processor_backend': 'auto',
    'mm_global_cache_backend': 'mooncake',
    'mm_feature_transport': 'cpu',
    'lora_use_virtual_experts': False,
    'lora_strict_loading': False,
    'lora_drain_wait_threshold': 0.0,
    'lmcache_config_file': None,
    'enable_flexkv': False,
    'flexkv_config_file': None,
    'dllm_fdfo': True,
    'disaggregation_decode_enable_radix_cache': False,
    'disaggregation_decode_retraction_backup': None,
    'disaggregation_decode_extra_slots': None,
    'optimistic_prefill_attempts': 0,
    'language_model_only': False,
    'encoder_bootstrap_port': 8997,
    'encoder_register_urls': [],
    'startup_weight_load_mode': 'serial',
    'weight_loader_prefetch_checkpoints': False,
    'weight_loader_prefetch_num_threads': 4,
    'weight_loader_drop_cache_after_load': False,
    'prefill_delayer_queue_min_ratio': None,
    'prefill_delayer_max_delay_ms': None,
    'min_free_slots_delay': None,
    'kv_canary': 'none',
    'kv_canary_real_data': 'none',
    'kv_canary_sweep_interval': 0,
    'return_hidden_states_mode': None,
    'enable_return_indexer_topk': False,
    'sampling_mask_max_tokens': 4096,
    'enable_mis': False,
    'weight_cache_mode': 'off',
    'weight_cache_socket': None,
    'weight_cache_timeout': 1800,
    'msprobe_dump_config': None,
    'ple_offload_embedding': None,
    'ple_offload_backend': 'pinned',
    'ple_offload_dir': None,
    'disaggregation_enable_kv_checksum': False,
    'enable_pd_role_switch': False,
    'speculative_domino_candidate_pool_size': 2048,
    'flashinfer_a2a_dispatch_type': None,
    'cuda_graph_max_seq_len_prefill': None,
    'prefill_kv_cache_dequant_dtype': 'auto',
    'dsv4_attn_backend': 'auto',
    'otlp_service_name': None,
    '_radix_eviction_policy_explicitly_set': False,
    'hicache_host_memory_fraction': 0.8,
    'enable_linker_mla_dedup': False,
    '_swa_full_tokens_ratio_explicitly_set': False,
    'swa_prefix_tails': None,
    'enable_encoder_swa_bounded_replay': False,
    'enable_decoder_swa_bounded_replay': None,
    'enable_response_store': False,
    'disaggregation_decode_host_receive_threshold': 1.0,
    'qsa_indexer_dtype': 'auto',
    'disaggregation_decode_allocation_policy': 'early',
    'speculative_boundary_reduction': 'rs+rsv',
    'speculative_use_block_verification': False,
    'speculative_draft_sink_size': None,
    'disable_aiter_allreduce_fusion_in_prefill': False,
    'disable_aiter_allreduce_fusion_in_decode': False,
    'enable_amd_monokernel': False,
    'dsa_triton_union': 0,
    'enable_dsa_fused_indexer': None,
    'enable_cp_tp_group_sharing': False,
    'enable_watermark': False,
    'watermark_config': '<redacted>',
    'watermark_key': '<redacted>',
    'watermark_key_b': '<redacted>',
    'watermark_context_window': 4,
    'watermark_mixing_probability': 0.5,
    'watermark_max_probability': 1.0,
    'watermark_default_enabled': False,
    'watermark_enforce_all': False,
    'grpc_response_timeout_secs': 300,
    'enable_paged_experts': False,
    'paged_experts_num_resident': None,
    'enable_nvidia_megakernel': False,
    'enable_megamoe_for_layernorm_sp': False,
    'enable_http_worker_reuseport': False,
    'prefill_decode_interval_min_bs': 0,
    'unified_cache_external_linker_config': None,
    'enable_return_aux_hidden_states': False,
    'aux_hidden_state_capture': None,
    'return_aux_hidden_state_layer_ids': None,
    'hicache_object_layout': {'enabled': False, 'backend': None, 'page_size': 1, 'hicache_object_layout': {'pools': []}, 'reason': 'Hierarchical cache is disabled'},
    'kv_events': None,
    'frontend': 'python',
}

SERVER_ARGS_DEFAULTS_0523 = {k: _NEW_IN_0523[k] if k in _NEW_IN_0523 else SERVER_ARGS_DEFAULTS[k] for k in _ORDER_0523}

TOP_LEVEL_ONLY_0523 = ['custom_sigquit_handler', 'frontend', 'hicache_object_layout', 'kv_events']

# /model_info's `embedding` block of a generative model (0.5.23, as captured).
EMBEDDING_INFO_0523 = {
    'family': 'none',
    'task': 'none',
    'execution': 'none',
    'attention': 'none',
    'pooling': 'model_defined',
    'normalize': False,
    'postprocessor': 'none',
    'tokenizer_special_tokens': 'model_default',
    'supports_dimensions': False,
    'supports_token_embeddings': False,
    'supports_multimodal': False,
    'requires_embedding_flag': False,
    'auto_enable_embedding': False,
    'bcg_eligibility': 'disabled',
    'safe_disable_kv_cache': False,
    'safe_disable_radix_cache': False,
    'safe_disable_chunked_prefill': False,
    'enabled': False,
    'matryoshka_dimensions': [],
    'bcg': {'prefill_backend': 'disabled', 'enabled': False, 'capture_token_budget': 4096, 'capture_batch_sizes': [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096]},
    'cache': {'kv_cache_disabled': False, 'radix_cache_disabled': False, 'chunked_prefill_disabled': False},
}
