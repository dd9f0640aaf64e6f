# Builds tests/package as a host project of streamllm in mode MODE and runs it.
# -DSRC=<streamllm source> -DWORK=<scratch folder> -DMODE=<...> -DMODEL=<.bin> -DTOKENIZER=<.model>
file(REMOVE_RECURSE "${WORK}")
set(prefix_args "")
if(MODE STREQUAL "find_package")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/lib -DSTREAMLLM_BUILD_TESTS=OFF
                    -DSTREAMLLM_BUILD_BENCHMARKS=OFF -DSTREAMLLM_BUILD_EXAMPLES=OFF
                  COMMAND_ERROR_IS_FATAL ANY OUTPUT_QUIET)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/lib --prefix ${WORK}/prefix
                  COMMAND_ERROR_IS_FATAL ANY OUTPUT_QUIET)
  set(prefix_args -DCMAKE_PREFIX_PATH=${WORK}/prefix)
endif()
# A Debug host: what is under test is the packaging (and the headers compiling
# without NDEBUG), and -O0 compiles in half the time of Release.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/tests/package -B ${WORK}/host -DHOST_MODE=${MODE}
                  -DSTREAMLLM_SOURCE=${SRC} -DCMAKE_BUILD_TYPE=Debug --no-warn-unused-cli ${prefix_args}
                COMMAND_ERROR_IS_FATAL ANY OUTPUT_QUIET)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/host COMMAND_ERROR_IS_FATAL ANY OUTPUT_QUIET)
execute_process(COMMAND ${WORK}/host/host ${MODEL} ${TOKENIZER} OUTPUT_VARIABLE out COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "host (${MODE}) printed: ${out}")
if(NOT out MATCHES "^, there was a little girl named Lily. She loved to play")
  message(FATAL_ERROR "the host program (${MODE}) did not stream the expected story")
endif()
