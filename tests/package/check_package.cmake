# CTest driver (package.consumers): the library as other CMake projects consume it.
#  1. the build installed to a prefix; the three consumers (loader-only, trainer, umbrella) built
#     against it with find_package and run; the loader-only one must not link HDF5 or the trainer;
#  2. the same consumers with stoker vendored through add_subdirectory, as static libraries
#     (BUILD_SHARED_LIBS=OFF set by the parent, which stoker must not override), built and run;
#  3. that static build installed and consumed with find_package again.
set(work ${BUILD_DIR}/package-test)
file(REMOVE_RECURSE ${work})
set(data ${SOURCE_DIR}/data/catsdogs-sample)
set(model ${SOURCE_DIR}/data/models/mobilenet_v2_0.35_224_3class.h5)
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# Builds the consumers in <dir> (configure arguments after it) and runs each.
function(build_and_run dir)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${dir} -DCMAKE_BUILD_TYPE=Release ${ARGN})
  run(${CMAKE_COMMAND} --build ${dir} --parallel ${cores})
  run(${dir}/loader_consumer ${data})
  if(NOT last_output MATCHES "loaded 300 images")
    message(FATAL_ERROR "loader_consumer: expected 300 images, got: ${last_output}")
  endif()
  run(${dir}/trainer_consumer ${model})
  run(${dir}/umbrella_consumer ${data} ${model} ${dir}/model)
  if(NOT last_output MATCHES "validation accuracy")
    message(FATAL_ERROR "umbrella_consumer: ${last_output}")
  endif()
  # A program that only loads and augments links no HDF5 and no trainer, directly or through a
  # shared stoker library. (Debian's OpenCV loads HDF5 itself; that is not stoker's link.)
  file(READ ${dir}/CMakeFiles/loader_consumer.dir/link.txt link_line)
  if(link_line MATCHES "hdf5|stoker_trainer|stoker_training")
    message(FATAL_ERROR "loader_consumer links the trainer or HDF5:\n${link_line}")
  endif()
  execute_process(COMMAND ldd ${dir}/loader_consumer OUTPUT_VARIABLE libs)
  if(libs MATCHES "stoker_train")
    message(FATAL_ERROR "loader_consumer loads the trainer:\n${libs}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix)
if(EXISTS ${work}/prefix/include/stoker/core/detail OR EXISTS ${work}/prefix/include/stoker/augment/pixel.hpp)
  message(FATAL_ERROR "internal headers were installed")
endif()
build_and_run(${work}/installed -DCMAKE_PREFIX_PATH=${work}/prefix)

build_and_run(${work}/vendored-static -DSTOKER_SOURCE=${SOURCE_DIR} -DBUILD_SHARED_LIBS=OFF -DSTOKER_CUDA=OFF)
if(NOT EXISTS ${work}/vendored-static/stoker/core/libstoker_core.a)
  message(FATAL_ERROR "the parent's BUILD_SHARED_LIBS=OFF did not make static stoker libraries")
endif()

run(${CMAKE_COMMAND} --install ${work}/vendored-static --prefix ${work}/static-prefix)
build_and_run(${work}/installed-static -DCMAKE_PREFIX_PATH=${work}/static-prefix)
