# CPU test: the generated table of docs/lessons.md matches the kernels (docs/lesson_diff.py).
# Include it where the CPU tests are defined, after enable_testing():
#   include(${PROJECT_SOURCE_DIR}/docs/lessons_test.cmake)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  # The pairs come from the registry of this build's tour (which rung each builds on).
  add_test(NAME cpu_lesson_diff
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/docs/lesson_diff.py
                   --check ${PROJECT_SOURCE_DIR}/docs/lessons.md --bin $<TARGET_FILE_DIR:fl_tour>
                   ${PROJECT_SOURCE_DIR}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cpu_lesson_diff PROPERTIES LABELS cpu)
else()
  message(WARNING "cpu_lesson_diff not added: no python3 interpreter found")
endif()
