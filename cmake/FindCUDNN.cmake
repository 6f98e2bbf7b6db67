# Finds cuDNN's headers and library wherever the usual installs put them:
#   1. CUDNN_ROOT (a CMake or environment variable): a folder with include/ and lib/ or lib64/;
#   2. the CUDA toolkit's own folders (NVIDIA's cudnn-devel images, the local .deb/.run installs);
#   3. the system's (Debian/Ubuntu's libcudnn9-dev-cuda-*: /usr/include, /usr/lib/<triplet>);
#   4. the nvidia-cudnn-cu12/cu13 wheel of a Python environment (what PyTorch brings), found by
#      asking Python3_EXECUTABLE, or python3 on the PATH, where `nvidia.cudnn` lives.
# Wheels ship only the versioned library (libcudnn.so.9) and no libcudnn.so, so both names are
# searched. Sets CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY (empty in the header-only mode),
# CUDNN_VERSION, and the imported target CUDNN::cudnn.
#
#   find_package(CUDNN [REQUIRED] [COMPONENTS headers])   # headers: no library needed (emulator)

# A root other than the one the cached results came from starts the search afresh.
set(_cudnn_root_asked "${CUDNN_ROOT}|$ENV{CUDNN_ROOT}|$ENV{CUDNN_PATH}")
if(DEFINED _CUDNN_ROOT_USED AND NOT _CUDNN_ROOT_USED STREQUAL _cudnn_root_asked)
  unset(CUDNN_INCLUDE_DIR CACHE)
  unset(CUDNN_LIBRARY CACHE)
endif()
set(_CUDNN_ROOT_USED "${_cudnn_root_asked}" CACHE INTERNAL "cuDNN roots of the last search")

set(_cudnn_hints)
foreach(root IN ITEMS "${CUDNN_ROOT}" "$ENV{CUDNN_ROOT}" "$ENV{CUDNN_PATH}")
  if(root)
    list(APPEND _cudnn_hints "${root}")
  endif()
endforeach()
if(CUDAToolkit_INCLUDE_DIRS)
  foreach(inc IN LISTS CUDAToolkit_INCLUDE_DIRS)
    get_filename_component(up "${inc}" DIRECTORY)
    list(APPEND _cudnn_hints "${up}")
  endforeach()
endif()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _cudnn_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()

# The Python wheel's folder, asked only when nothing above or on the system has cuDNN.
set(_cudnn_py_hint "")
function(_cudnn_python_root out)
  set(${out} "" PARENT_SCOPE)
  if(Python3_EXECUTABLE)
    set(_cudnn_py "${Python3_EXECUTABLE}")
  else()
    find_program(_CUDNN_PYTHON NAMES python3 python)
    mark_as_advanced(_CUDNN_PYTHON)
    set(_cudnn_py "${_CUDNN_PYTHON}")
  endif()
  if(_cudnn_py)
    execute_process(
      COMMAND "${_cudnn_py}" -c "import nvidia.cudnn as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND IS_DIRECTORY "${dir}")
      set(${out} "${dir}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

set(_cudnn_lib_names cudnn libcudnn.so.9 libcudnn.so.8)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} PATH_SUFFIXES include)
if(NOT CUDNN_INCLUDE_DIR)
  _cudnn_python_root(_cudnn_py_hint)
  if(_cudnn_py_hint)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS "${_cudnn_py_hint}" PATH_SUFFIXES include
              NO_DEFAULT_PATH)
  endif()
endif()

set(_cudnn_need_lib TRUE)
if(CUDNN_FIND_COMPONENTS STREQUAL "headers")
  set(_cudnn_need_lib FALSE)
endif()
if(_cudnn_need_lib AND CUDNN_INCLUDE_DIR)
  # Look beside the headers first, so headers and library come from the same install.
  get_filename_component(_cudnn_root "${CUDNN_INCLUDE_DIR}" DIRECTORY)
  find_library(CUDNN_LIBRARY NAMES ${_cudnn_lib_names} NAMES_PER_DIR
               HINTS "${_cudnn_root}" PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu
               NO_DEFAULT_PATH)
  if(NOT CUDNN_LIBRARY)
    find_library(CUDNN_LIBRARY NAMES ${_cudnn_lib_names} NAMES_PER_DIR HINTS ${_cudnn_hints}
                 PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
  endif()
endif()

set(CUDNN_VERSION "")
foreach(h IN ITEMS cudnn_version.h cudnn.h)
  if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/${h}" AND NOT CUDNN_VERSION)
    file(STRINGS "${CUDNN_INCLUDE_DIR}/${h}" _cudnn_defs REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    if(_cudnn_defs)
      string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" _maj "${_cudnn_defs}")
      string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" _min "${_cudnn_defs}")
      string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" _pat "${_cudnn_defs}")
      set(CUDNN_VERSION "${_maj}.${_min}.${_pat}")
    endif()
  endif()
endforeach()

# Headers and library of different majors (two installs) would fail at run time: refuse.
if(CUDNN_LIBRARY AND CUDNN_VERSION)
  get_filename_component(_cudnn_real "${CUDNN_LIBRARY}" REALPATH)
  string(REGEX MATCH "\\.so\\.([0-9]+)" _cudnn_so "${_cudnn_real}")
  if(_cudnn_so AND NOT CMAKE_MATCH_1 STREQUAL _maj)
    message(FATAL_ERROR "cuDNN: headers in ${CUDNN_INCLUDE_DIR} are version ${CUDNN_VERSION} but "
            "${CUDNN_LIBRARY} is major ${CMAKE_MATCH_1}; point CUDNN_ROOT at one install")
  endif()
endif()

set(_cudnn_required CUDNN_INCLUDE_DIR)
if(_cudnn_need_lib)
  list(APPEND _cudnn_required CUDNN_LIBRARY)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS ${_cudnn_required}
  VERSION_VAR CUDNN_VERSION
  REASON_FAILURE_MESSAGE
    "cuDNN (cudnn.h and libcudnn) was not found in CUDNN_ROOT, the CUDA toolkit, the system or a Python environment's nvidia-cudnn wheel. Install libcudnn9-dev-cuda-<major> (NVIDIA's apt repository) or `pip install nvidia-cudnn-cu13`, or pass -DCUDNN_ROOT=<folder with include/ and lib/>.")

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  if(CUDNN_LIBRARY)
    add_library(CUDNN::cudnn UNKNOWN IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}")
  else()
    add_library(CUDNN::cudnn INTERFACE IMPORTED)
  endif()
  set_target_properties(CUDNN::cudnn PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
