/* layers-graph fixture: the upper room calling the lower one (allowed). */
int th_rooms_high(int x);
int th_rooms_low(int x);

int th_rooms_high(int x)
{
    return th_rooms_low(x) + 1;
}
