# The test suites (tests/test_*.cpp): one Boost.Test runner per area, a ctest entry per file and
# per long or conditional case, and the helpers some suites run. Included by CMakeLists.txt, in
# its scope (paths are the top-level source and build directories).
# scripts/demo's set-up installs no Boost: without it the library, the tool, the demos and the
# benches build, and scripts/build configures again once scripts/setup test has installed it.
if(KILN_BUILD_TESTS)
  find_package(Boost 1.74 QUIET COMPONENTS unit_test_framework)
  if(NOT Boost_FOUND)
    message(STATUS "kiln: Boost.Test is missing, so the test suites are not built "
                   "(scripts/setup test installs libboost-test-dev)")
  endif()
endif()
set(KILN_TESTS_CONFIGURED ${Boost_FOUND} CACHE INTERNAL "whether this configuration has the suites")
if(KILN_BUILD_TESTS AND Boost_FOUND)
  enable_testing()
  # Cases that run only where their precondition holds (tests/support/skip_if.h): each is a ctest
  # entry of its own, shown as Skipped where Boost.Test skips it, and the suite's entry leaves it
  # out. One case per entry, since a skip matched in the output overrides the exit code.
  set(kiln_conditional_cases
    test_cache:disk_store/a_read_only_directory_is_not_used
    test_cache:disk_store/a_directory_owned_by_another_user_is_not_used
    test_determinism:determinism/the_check_catches_a_sum_whose_order_depends_on_the_schedule
    test_device_backend:backend_selection/stub_driver_is_not_a_driver
    test_device_backend:backend_selection/auto_falls_back_with_one_notice_line
    test_device_backend:backend_contract/driver_round_trip_on_a_gpu
    test_device_blaslt:blaslt_rules/the_driver_matches_the_reference_on_a_gpu
    test_report:report_browser/the_page_loads_in_headless_chromium
    test_attention_shared_memory:attention_shared_memory/f32_head_dim_256_runs_where_the_budget_fits
    test_attention_shared_memory:attention_shared_memory/a_48_kb_device_refuses_f32_head_dim_256_and_keeps_the_ops
    test_attention_shared_memory:attention_shared_memory/explain_shows_the_tiles_of_each_device
    test_attention_rewrite:attention_rewrite/a_call_the_kernels_refuse_keeps_its_ops
    test_attention_rewrite:attention_rewrite/a_step_that_falls_back_at_run_time_is_not_a_kernel_call
    test_dist_nccl:without_libnccl_the_nccl_backend_is_an_error_naming_it
    test_dist_nccl:libnccl_has_every_function_the_backend_calls
    test_dist_nccl:a_one_rank_group_on_a_gpu_leaves_every_tensor_as_it_was)
  # Cases long enough to be entries of their own, so that ctest keeps both cores busy to the end:
  # the fuzzers' shards, each zoo model's training, the attention rewrite on each zoo model.
  list(APPEND kiln_conditional_cases
    test_fuzz_codegen:fuzz_codegen/random_programs_shard_0
    test_fuzz_codegen:fuzz_codegen/random_programs_shard_1
    test_zoo:model_zoo/gpt2_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/llama_head_dim_8_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/llama_head_dim_16_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/vit_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/mixer_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/neox_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/bert_trains_on_cuda_as_in_f64_on_the_cpu
    test_zoo:model_zoo/dropout_steps_compiled_equal_eager_from_the_same_seed
    test_fuzz_training:fuzz_training/random_models_shard_0
    test_fuzz_training:fuzz_training/random_models_shard_1
    test_fuzz_training:fuzz_training/random_models_shard_2
    test_fuzz_training:fuzz_training/random_models_shard_3
    test_attention_blocks:attention_blocks/the_rewrite_never_adds_launches_to_gpt2_training
    test_attention_blocks:attention_blocks/the_rewrite_never_adds_launches_to_llama_training
    test_attention_blocks:attention_blocks/the_rewrite_never_adds_launches_to_vit_training
    test_attention_blocks:attention_blocks/the_rewrite_never_adds_launches_to_neox_training
    test_attention_blocks:attention_blocks/the_rewrite_never_adds_launches_to_bert_training)
  set(kiln_skip_message "is skipped because precondition failed")
  # Cases a suite runs only in a child process of its own (disabled, which naming the file's
  # suite in a filter would undo): the file's entry leaves them out.
  set(kiln_child_cases test_device_backend:backend_selection/stub_driver_child)
  # Files whose every case is an entry of its own: no entry for the file, whose filter would
  # select nothing.
  set(kiln_files_split_by_case test_zoo)
  # Seconds the longest entries took on a 2-core machine (scripts/time-clean-clone's run): ctest
  # starts the costliest first when it has no timings of its own yet (a clean clone), so that no
  # long entry starts last and leaves a core idle.
  set(kiln_test_costs
    test_codegen_cubin:150 test_fuzz_training.random_models_shard_0:70
    test_fuzz_training.random_models_shard_1:70 test_fuzz_training.random_models_shard_2:70
    test_fuzz_training.random_models_shard_3:70
    test_fuzz_codegen.random_programs_shard_0:45 test_fuzz_codegen.random_programs_shard_1:45
    test_attention_blocks.the_rewrite_never_adds_launches_to_llama_training:50
    test_demo_gpt:43 test_cuda_eager:39
    test_attention_blocks.the_rewrite_never_adds_launches_to_gpt2_training:39
    test_attention_blocks:35 test_codegen_attention:34 test_codegen_reduction_layout:32
    test_codegen_pointwise:27 test_attention:25
    test_attention_shared_memory.f32_head_dim_256_runs_where_the_budget_fits:25
    test_attention_gqa:23 test_codegen_reduction:23
    test_attention_blocks.the_rewrite_never_adds_launches_to_neox_training:22
    test_attention_blocks.the_rewrite_never_adds_launches_to_vit_training:20
    test_attention_blocks.the_rewrite_never_adds_launches_to_bert_training:34
    test_zoo.bert_trains_on_cuda_as_in_f64_on_the_cpu:18
    test_zoo.llama_head_dim_8_trains_on_cuda_as_in_f64_on_the_cpu:15
    test_zoo.llama_head_dim_16_trains_on_cuda_as_in_f64_on_the_cpu:15
    test_zoo.neox_trains_on_cuda_as_in_f64_on_the_cpu:12
    test_zoo.gpt2_trains_on_cuda_as_in_f64_on_the_cpu:12
    test_zoo.dropout_steps_compiled_equal_eager_from_the_same_seed:12
    test_cuda_kernels_only:14 test_dist_ddp:14 test_layers:13)

  # One Boost.Test runner per area instead of an executable per file: each file compiles once as
  # a unit that wraps it in a suite of its own name (tests/support/file_suite.h), and ctest keeps
  # an entry per file (`kiln_tests_AREA --run_test=test_x`). First match wins.
  set(kiln_test_areas
    "device:^test_device_"
    "codegen:^test_(codegen|kernel|cuda|vgpu|determinism|random)_?"
    "attention:^test_(attention|blaslt)_"
    "autograd:^test_(ops|gradcheck|autograd|tensor|factories|errors|op_table|grad|nn|optim|fused|autocast)_?"
    "graph:^test_(graph|pass_pipeline|fusion)_?"
    "dist:^test_dist_"
    "jit:.")
  # Suites of generated kernels run a second time under a shuffled schedule (virtual GPU).
  set(kiln_random_schedule_suites "^test_(device_corpus_|codegen_pointwise|codegen_reduction|jit_cuda$)")
  # Never the developer's ~/.cache/kiln: one kernel cache under the build directory, shared by
  # every suite (docs/tools.md says why that is safe).
  set(kiln_test_cache KILN_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/test-kernel-cache)
  set(kiln_test_common_args --log_level=test_suite --report_level=short)

  add_library(kiln_test_main OBJECT tests/support/test_main.cpp)
  target_link_libraries(kiln_test_main PUBLIC Boost::unit_test_framework)
  target_compile_definitions(kiln_test_main PUBLIC BOOST_TEST_DYN_LINK)

  file(GLOB KILN_TESTS CONFIGURE_DEPENDS tests/test_*.cpp)
  if(NOT KILN_HAVE_DIST)  # dist/ is built only where Gloo is found
    list(FILTER KILN_TESTS EXCLUDE REGEX "/test_dist_[^/]*$")
  endif()
  foreach(area_rule ${kiln_test_areas})
    string(REGEX MATCH "^[a-z]+" area "${area_rule}")
    set(kiln_area_sources_${area} "")
  endforeach()
  foreach(src ${KILN_TESTS})
    get_filename_component(name ${src} NAME_WE)
    foreach(area_rule ${kiln_test_areas})
      string(REGEX MATCH "^[a-z]+" area "${area_rule}")
      string(REGEX REPLACE "^[a-z]+:" "" pattern "${area_rule}")
      if(name MATCHES "${pattern}")
        break()
      endif()
    endforeach()
    set(unit ${CMAKE_CURRENT_BINARY_DIR}/test_units/${name}.unit.cpp)
    set(KILN_TEST_NAME ${name})
    configure_file(tests/support/file_suite_unit.cpp.in ${unit} @ONLY)
    # GCC 12 under the sanitizers misreads std::regex's copies of its states as uninitialized.
    if(KILN_SANITIZE AND name MATCHES "^test_(readme|report|cache_tool)$")
      set_source_files_properties(${unit} PROPERTIES COMPILE_OPTIONS -Wno-maybe-uninitialized)
    endif()
    list(APPEND kiln_area_sources_${area} ${unit})
    set(kiln_area_of_${name} ${area})
  endforeach()

  # Headers every test unit of an area reads, parsed once into a precompiled header.
  set(kiln_test_pch_common <boost/test/unit_test.hpp> <algorithm> <cmath> <cstdint> <functional>
      <map> <memory> <optional> <set> <sstream> <string> <vector>)
  # kiln's API only: a test's own helper may share a name with one of tests/support/.
  set(kiln_test_pch_kiln [["autograd/ops.h"]] [["autograd/nn.h"]] [["jit/compile.h"]])
  set(kiln_test_pch_source "")
  foreach(area_rule ${kiln_test_areas})
    string(REGEX MATCH "^[a-z]+" area "${area_rule}")
    if(NOT kiln_area_sources_${area})
      continue()
    endif()
    set(runner kiln_tests_${area})
    add_executable(${runner} ${kiln_area_sources_${area}} $<TARGET_OBJECTS:kiln_test_main>)
    target_include_directories(${runner} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
    # The suites' time goes to the library they call; their own code, mostly Boost.Test's
    # assertion templates, compiles in half the time at -O1.
    if(CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$")
      target_compile_options(${runner} PRIVATE -O1)
    endif()
    # GCC keeps -Wsubobject-linkage quiet in a main file only: each test file is the real main
    # file of its unit, so a fixture in its anonymous namespace is not a header's mistake.
    target_compile_options(${runner} PRIVATE -Wno-subobject-linkage)
    # Files made outside kiln (tests/fixtures, with their provenance), for tests of what others write.
    target_compile_definitions(${runner} PRIVATE
      KILN_TEST_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures")
    if(area STREQUAL "device")
      # tests/test_device_*.cpp exercise kiln_device alone, seeing its headers only.
      target_link_libraries(${runner} PRIVATE kiln_test_main kiln_device)
      target_include_directories(${runner} PRIVATE ${KILN_LAYER_VIEWS}/device)
      if(KILN_PCH)
        target_precompile_headers(${runner} PRIVATE ${kiln_test_pch_common})
      endif()
    else()
      target_link_libraries(${runner} PRIVATE kiln_test_main kiln)
      if(area STREQUAL "dist")
        target_link_libraries(${runner} PRIVATE kiln_dist)
      endif()
      if(KILN_PCH AND kiln_test_pch_source)
        target_precompile_headers(${runner} REUSE_FROM ${kiln_test_pch_source})
      elseif(KILN_PCH)
        target_precompile_headers(${runner} PRIVATE ${kiln_test_pch_common} ${kiln_test_pch_kiln})
        set(kiln_test_pch_source ${runner})
      endif()
    endif()
  endforeach()

  foreach(src ${KILN_TESTS})
    get_filename_component(name ${src} NAME_WE)
    set(runner kiln_tests_${kiln_area_of_${name}})
    set(conditional "")
    foreach(entry ${kiln_conditional_cases})
      if(entry MATCHES "^${name}:(.*)$")
        list(APPEND conditional "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    set(left_out ${conditional})
    foreach(entry ${kiln_child_cases})
      if(entry MATCHES "^${name}:(.*)$")
        list(APPEND left_out "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    set(filter "--run_test=${name}")
    foreach(case ${left_out})
      string(APPEND filter ":!${name}/${case}")
    endforeach()
    if(NOT name IN_LIST kiln_files_split_by_case)
      add_test(NAME ${name} COMMAND ${runner} ${kiln_test_common_args} ${filter})
      # A skipped case left in the suite's entry would read as a pass: list it above instead.
      set_tests_properties(${name} PROPERTIES TIMEOUT 600 ENVIRONMENT "${kiln_test_cache}"
        FAIL_REGULAR_EXPRESSION "${kiln_skip_message}")
    endif()
    foreach(case ${conditional})
      get_filename_component(case_name ${case} NAME)
      add_test(NAME ${name}.${case_name}
        COMMAND ${runner} ${kiln_test_common_args} --run_test=${name}/${case})
      set_tests_properties(${name}.${case_name} PROPERTIES TIMEOUT 600
        ENVIRONMENT "${kiln_test_cache}" SKIP_REGULAR_EXPRESSION "${kiln_skip_message}")
    endforeach()
    if(name MATCHES "${kiln_random_schedule_suites}")
      add_test(NAME ${name}_random COMMAND ${runner} ${kiln_test_common_args} ${filter})
      set_tests_properties(${name}_random PROPERTIES TIMEOUT 600
        ENVIRONMENT "KILN_VGPU_SCHEDULE=random:1;${kiln_test_cache}"
        FAIL_REGULAR_EXPRESSION "${kiln_skip_message}")
    endif()
  endforeach()

  foreach(entry ${kiln_test_costs})
    string(REGEX MATCH "^[^:]+" test "${entry}")
    string(REGEX REPLACE "^[^:]+:" "" cost "${entry}")
    if(TEST ${test})  # test_dist_* exist only where Gloo is found
      set_tests_properties(${test} PROPERTIES COST ${cost})
    endif()
  endforeach()

  # Definitions one test file reads, on its unit alone (the precompiled header never reads them).
  function(kiln_test_definitions name)  # then the definitions
    set_property(SOURCE ${CMAKE_CURRENT_BINARY_DIR}/test_units/${name}.unit.cpp
      APPEND PROPERTY COMPILE_DEFINITIONS ${ARGN})
  endfunction()
  # The disk cache's tests run a helper in several processes, the kiln tool, and an install.
  add_executable(kiln_cache_worker tests/support/cache_worker.cpp)
  target_link_libraries(kiln_cache_worker PRIVATE kiln)
  add_dependencies(kiln_tests_${kiln_area_of_test_cache_tool} kiln_cache_worker kiln_tool)
  kiln_test_definitions(test_cache_tool KILN_CACHE_WORKER="$<TARGET_FILE:kiln_cache_worker>"
                        KILN_TOOL="$<TARGET_FILE:kiln_tool>")
  add_dependencies(kiln_tests_${kiln_area_of_test_report} kiln_tool)
  # The data-parallel suites run ranks of a helper under `kiln launch` (or a shell line).
  if(KILN_HAVE_DIST)
    add_executable(kiln_dist_worker tests/support/dist_worker.cpp)
    target_include_directories(kiln_dist_worker PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
    target_link_libraries(kiln_dist_worker PRIVATE kiln kiln_dist)
    add_dependencies(kiln_tests_dist kiln_dist_worker kiln_tool gpt_train)
    foreach(src ${KILN_TESTS})
      get_filename_component(name ${src} NAME_WE)
      if(name MATCHES "^test_dist_")
        kiln_test_definitions(${name} KILN_DIST_WORKER="$<TARGET_FILE:kiln_dist_worker>"
                              KILN_TOOL="$<TARGET_FILE:kiln_tool>"
                              KILN_GPT_TRAIN="$<TARGET_FILE:gpt_train>")
      endif()
    endforeach()
  endif()
  kiln_test_definitions(test_report KILN_TOOL="$<TARGET_FILE:kiln_tool>")
  # test_layers builds these: tests/layers/layer_probe.cpp compiled as a source of `layer`, also
  # including `header` when one is given.
  function(kiln_layer_probe target layer header)
    add_library(${target} OBJECT EXCLUDE_FROM_ALL tests/layers/layer_probe.cpp)
    target_include_directories(${target} PRIVATE ${KILN_LAYER_VIEWS}/${layer})
    target_link_libraries(${target} PRIVATE kiln_runtime)  # Eigen, fmt, CUDA headers
    if(header)
      target_compile_definitions(${target} PRIVATE KILN_PROBE_INCLUDE="${header}")
    endif()
  endfunction()
  kiln_layer_probe(kiln_layer_probe_cache cache "")
  kiln_layer_probe(kiln_layer_probe_jit_compile jit jit/compile.h)
  kiln_layer_probe(kiln_layer_probe_autograd_ops autograd autograd/ops.h)
  kiln_layer_probe(kiln_layer_probe_cache_includes_jit cache jit/compile.h)
  kiln_layer_probe(kiln_layer_probe_graph_includes_autograd graph autograd/ops.h)
  kiln_layer_probe(kiln_layer_probe_dist_ddp dist dist/ddp.h)
  kiln_layer_probe(kiln_layer_probe_jit_includes_dist jit dist/dist.h)
  kiln_test_definitions(test_layers KILN_BINARY_DIR="${CMAKE_CURRENT_BINARY_DIR}"
                        KILN_CMAKE_COMMAND="${CMAKE_COMMAND}")
  # It builds in this build tree, as test_install installs from it: never both at once.
  set_tests_properties(test_layers test_install PROPERTIES RESOURCE_LOCK kiln_build_tree)
  add_dependencies(kiln_tests_${kiln_area_of_test_install} kiln_tool)
  kiln_test_definitions(test_install KILN_BINARY_DIR="${CMAKE_CURRENT_BINARY_DIR}"
                        KILN_CMAKE_COMMAND="${CMAKE_COMMAND}" KILN_CXX_COMPILER="${CMAKE_CXX_COMPILER}")
  # A sanitized kiln needs the sanitizer runtimes linked into its consumer first.
  if(KILN_SANITIZE)
    kiln_test_definitions(test_install KILN_CONSUMER_LINK_FLAGS="-fsanitize=address,undefined")
  endif()
endif()
