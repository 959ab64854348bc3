/* fronts/line.h - the test tree's line-protocol front (line.c): an
 * example of a front added through its descriptor alone. */
#ifndef TH_TEST_LINE_FRONT_H
#define TH_TEST_LINE_FRONT_H

#include "th/front.h"
#include "th/section.h"

extern const th_section th_line_section;
extern const th_front th_line_front;

#endif
