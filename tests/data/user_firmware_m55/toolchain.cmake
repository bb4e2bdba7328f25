# The user's CMake toolchain file: arm-none-eabi-gcc for the Cortex-M55.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_C_FLAGS_INIT "-march=armv8.1-m.main+mve.fp+fp.dp -mfloat-abi=hard -mthumb")
