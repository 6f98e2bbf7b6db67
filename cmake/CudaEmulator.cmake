# libnn_emulated_cuda(TARGET CU...): the CUDA emulator build's way of compiling .cu files.
# Each is rewritten by tests/cuda_emu/rewrite.py (launches -> ::emu::launch, shared memory)
# into <binary dir>/cuda_emu/<its folder's name>/<name>.cpp and compiled into TARGET as C++
# with cuda_emu.h force-included. (scripts/check_toolchain.sh finds the rewritten files by
# that cuda_emu/ folder.)
function(libnn_emulated_cuda target)
  set(emu_dir ${PROJECT_SOURCE_DIR}/tests/cuda_emu)
  set(sources)
  foreach(cu IN LISTS ARGN)
    get_filename_component(dir ${cu} DIRECTORY)
    get_filename_component(group ${dir} NAME)
    get_filename_component(name ${cu} NAME_WE)
    set(cpp ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/${group}/${name}.cpp)
    add_custom_command(OUTPUT ${cpp}
      COMMAND ${Python3_EXECUTABLE} ${emu_dir}/rewrite.py ${cu} ${cpp}
      DEPENDS ${cu} ${emu_dir}/rewrite.py VERBATIM)
    list(APPEND sources ${cpp})
  endforeach()
  set_source_files_properties(${sources} PROPERTIES
    COMPILE_OPTIONS "-include;${emu_dir}/cuda_emu.h;-Wno-unused-parameter;-Wno-unknown-pragmas")
  target_sources(${target} PRIVATE ${sources})
  target_include_directories(${target} PRIVATE ${emu_dir} ${CUDAToolkit_INCLUDE_DIRS})
endfunction()
