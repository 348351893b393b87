void run_plugins(int x);

int main(void) {
    run_plugins(7);
    return 0;
}
