# CTest driver: install the built stoker to a temporary prefix, build the consumer against it with
# find_package, and run it on the bundled sample; then check that add_subdirectory configures too.
set(work ${BUILD_DIR}/package-test)
file(REMOVE_RECURSE ${work})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${work}/installed
    -DCMAKE_PREFIX_PATH=${work}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${work}/installed)
run(${work}/installed/consumer ${SOURCE_DIR}/data/catsdogs-sample)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${work}/vendored -DSTOKER_SOURCE=${SOURCE_DIR}
    -DSTOKER_CUDA=OFF)
