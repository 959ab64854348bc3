/* layers-graph fixture: the lower room calling a function of the room
 * above it, which `scripts/layers-graph -r` must refuse. */
int th_rooms_high(int x);
int th_rooms_low(int x);

int th_rooms_low(int x)
{
    return x > 0 ? th_rooms_high(x - 1) : 0;
}
